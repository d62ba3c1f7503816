/* Human tables: columns sized to their widest cell, numbers right-aligned,
 * units in the header. */
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

struct util_table {
    int ncols;
    char **hdr;
    char *align;
    char ***rows; /* rows[r] == NULL marks a separator */
    int nrows, cap;
};

util_table *util_table_new(int ncols)
{
    util_table *t = util_calloc(1, sizeof *t);
    t->ncols = ncols;
    t->hdr = util_calloc((size_t)ncols, sizeof *t->hdr);
    t->align = util_calloc((size_t)ncols, 1);
    memset(t->align, 'r', (size_t)ncols);
    return t;
}

void util_table_free(util_table *t)
{
    if (!t) return;
    for (int c = 0; c < t->ncols; c++) free(t->hdr[c]);
    for (int r = 0; r < t->nrows; r++) {
        if (!t->rows[r]) continue;
        for (int c = 0; c < t->ncols; c++) free(t->rows[r][c]);
        free(t->rows[r]);
    }
    free(t->rows);
    free(t->hdr);
    free(t->align);
    free(t);
}

void util_table_col(util_table *t, int col, const char *header, char align)
{
    free(t->hdr[col]);
    t->hdr[col] = util_strdup(header);
    t->align[col] = align;
}

static void push(util_table *t, char **row)
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->rows = util_realloc(t->rows, sizeof *t->rows * (size_t)t->cap);
    }
    t->rows[t->nrows++] = row;
}

void util_table_row(util_table *t, const char *const *cells)
{
    char **row = util_calloc((size_t)t->ncols, sizeof *row);
    for (int c = 0; c < t->ncols; c++)
        row[c] = util_strdup(cells[c] ? cells[c] : "");
    push(t, row);
}

void util_table_sep(util_table *t) { push(t, NULL); }

void util_table_print(const util_table *t, FILE *f, const char *indent)
{
    int *w = util_calloc((size_t)t->ncols, sizeof *w);
    for (int c = 0; c < t->ncols; c++) {
        w[c] = t->hdr[c] ? (int)strlen(t->hdr[c]) : 0;
        for (int r = 0; r < t->nrows; r++)
            if (t->rows[r] && (int)strlen(t->rows[r][c]) > w[c])
                w[c] = (int)strlen(t->rows[r][c]);
    }
    int total = 0;
    for (int c = 0; c < t->ncols; c++) total += w[c] + (c ? 2 : 0);
    const char *ind = indent ? indent : "";
    fputs(ind, f);
    for (int c = 0; c < t->ncols; c++)
        fprintf(f, t->align[c] == 'l' ? "%s%-*s" : "%s%*s", c ? "  " : "",
                c == t->ncols - 1 && t->align[c] == 'l' ? 0 : w[c],
                t->hdr[c] ? t->hdr[c] : "");
    fprintf(f, "\n%s", ind);
    for (int i = 0; i < total; i++) fputc('-', f);
    fputc('\n', f);
    for (int r = 0; r < t->nrows; r++) {
        fputs(ind, f);
        if (!t->rows[r]) {
            for (int i = 0; i < total; i++) fputc('-', f);
            fputc('\n', f);
            continue;
        }
        for (int c = 0; c < t->ncols; c++)
            fprintf(f, t->align[c] == 'l' ? "%s%-*s" : "%s%*s", c ? "  " : "",
                    c == t->ncols - 1 && t->align[c] == 'l' ? 0 : w[c],
                    t->rows[r][c]);
        fputc('\n', f);
    }
    free(w);
}
