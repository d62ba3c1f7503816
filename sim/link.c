/* Max-min fair sharing of directed links by progressive filling (as
 * flow-level simulators such as SimGrid do): raise every unfrozen flow's
 * rate together until some link is full, freeze the flows crossing it,
 * repeat. Flows with no link are not passed in (the engine finishes them
 * after their latency alone). */
#include <math.h>

#include "sim/sim.h"

void sim_maxmin(int nf, const int *const *route, const int *route_len,
                const double *cap, double *rate, sim_maxmin_scratch *w)
{
    if (nf == 1) { /* the common case in pipelines: the bottleneck */
        double r = cap[route[0][0]];
        for (int k = 1; k < route_len[0]; k++)
            if (cap[route[0][k]] < r) r = cap[route[0][k]];
        rate[0] = r;
        return;
    }
    int nt = 0;
    for (int f = 0; f < nf; f++) {
        w->frozen[f] = 0;
        for (int k = 0; k < route_len[f]; k++) {
            int l = route[f][k];
            if (!w->cnt[l]) {
                w->rem[l] = cap[l];
                w->touched[nt++] = l;
            }
            w->cnt[l]++;
        }
    }
    int left = nf;
    while (left > 0) {
        double share = HUGE_VAL;
        for (int i = 0; i < nt; i++) {
            int l = w->touched[i];
            if (w->cnt[l] > 0 && w->rem[l] / w->cnt[l] < share)
                share = w->rem[l] / w->cnt[l];
        }
        if (share == HUGE_VAL) break; /* cannot happen with routes >= 1 */
        if (share < 0) share = 0;
        double lim = share * (1 + 1e-12);
        int marked = 0;
        for (int f = 0; f < nf; f++) {
            if (w->frozen[f]) continue;
            for (int k = 0; k < route_len[f]; k++) {
                int l = route[f][k];
                if (w->rem[l] / w->cnt[l] <= lim) {
                    w->frozen[f] = 2; /* frozen this round */
                    marked++;
                    break;
                }
            }
        }
        for (int f = 0; f < nf; f++) {
            if (w->frozen[f] != 2) continue;
            w->frozen[f] = 1;
            rate[f] = share;
            for (int k = 0; k < route_len[f]; k++) {
                int l = route[f][k];
                w->rem[l] -= share;
                w->cnt[l]--;
            }
        }
        left -= marked;
        if (!marked) break;
    }
    for (int i = 0; i < nt; i++) w->cnt[w->touched[i]] = 0;
}
