/* Access to the profiles compiled into the binary (see embed.sh). */
#include "profiles/profiles.h"

#include <string.h>

extern const char *const prof_builtin_names_[];
extern const char *const prof_builtin_texts_[];

const char *prof_builtin(const char *relpath)
{
    for (int i = 0; prof_builtin_names_[i]; i++)
        if (!strcmp(prof_builtin_names_[i], relpath))
            return prof_builtin_texts_[i];
    return NULL;
}

const char *const *prof_builtin_list(void) { return prof_builtin_names_; }
