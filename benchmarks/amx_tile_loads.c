/* What tile loads cost the AMX tile multiply: tile schedules on data that stays in L1.
 *
 *   gcc -O2 -march=sapphirerapids benchmarks/amx_tile_loads.c -o /tmp/amx_tile_loads && /tmp/amx_tile_loads
 *
 * Each schedule runs steps of tdpbf16ps (16 x 16 x 32 BF16, 16384 FLOP each) on 16 rotating 1 KiB tiles of
 * A and B (32 KiB in all: L1), warmed for 0.1 s, then timed; the rounds alternate the schedules, so all see
 * the same state of a VM whose core slows down for seconds at a time. Prints, per schedule, the median
 * GFLOP/s and the median over rounds of its rate over that round's "registers" (no loads: the AMX peak).
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SCHEDULES = 5, ROUNDS = 15, STEPS = 20000 };

static const char *const names[SCHEDULES] = {
    "registers: 4 tdp a step, no loads",
    "2x2 (synet's): 2 A + 2 B loads, 4 tdp",
    "2x2, B resident: 2 A loads, 4 tdp",
    "1x2 twice: A, B double-buffered, 2 loads, 4 tdp",
    "1x1 twice: A, B double-buffered, 2 loads, 2 tdp",
};
static const int tdp_per_step[SCHEDULES] = {4, 4, 4, 4, 2};

static uint16_t a_tiles[2][16 * 512] __attribute__((aligned(64)));
static uint16_t b_tiles[2][16 * 512] __attribute__((aligned(64)));

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* load A and B into tiles LA, LB while multiplying those loaded a step earlier (UA, UB) */
#define DOUBLE_BUFFERED(LA, LB, UA, UB)       \
    do {                                      \
        _tile_loadd(LA, a0, 64);              \
        _tile_loadd(LB, b0, 64);              \
        _tile_dpbf16ps(0, UA, UB);            \
        _tile_dpbf16ps(1, UA, UB);            \
        if (schedule == 3) {                  \
            _tile_dpbf16ps(2, UA, UB);        \
            _tile_dpbf16ps(3, UA, UB);        \
        }                                     \
    } while (0)

static void steps(int schedule, int n)
{
    for (int i = 0; i < n; ++i) {
        const uint16_t *a0 = a_tiles[0] + (i & 15) * 512, *a1 = a_tiles[1] + (i & 15) * 512;
        const uint16_t *b0 = b_tiles[0] + (i & 15) * 512, *b1 = b_tiles[1] + (i & 15) * 512;
        switch (schedule) {
        case 0:
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            break;
        case 1:
            _tile_loadd(4, a0, 64);
            _tile_loadd(6, b0, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, b1, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, a1, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            break;
        case 2:
            _tile_loadd(4, a0, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, a1, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
            break;
        default: /* 3: four tdp on the tiles loaded a step earlier, 4: two */
            if (i & 1)
                DOUBLE_BUFFERED(4, 6, 5, 7);
            else
                DOUBLE_BUFFERED(5, 7, 4, 6);
            break;
        }
    }
}

static int by_value(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(void)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } config;
    double rate[SCHEDULES][ROUNDS];
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
        fprintf(stderr, "no AMX permission from Linux\n");
        return 1;
    }
    memset(&config, 0, sizeof(config));
    config.palette = 1;
    for (int t = 0; t < 8; ++t) {
        config.rows[t] = 16;
        config.colsb[t] = 64;
    }
    _tile_loadconfig(&config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int r = 0; r < ROUNDS; ++r)
        for (int k = 0; k < SCHEDULES; ++k) {
            const int s = (r & 1) ? SCHEDULES - 1 - k : k;
            for (const double end = now() + 0.1; now() < end;)
                steps(s, 1000);
            const double t0 = now();
            steps(s, STEPS);
            rate[s][r] = (double)STEPS * tdp_per_step[s] * 16384 / (now() - t0) / 1e9;
        }
    _tile_release();
    for (int s = SCHEDULES - 1; s >= 0; --s) { /* "registers" last: the others' ratios need its rates */
        double ratio[ROUNDS];
        for (int r = 0; r < ROUNDS; ++r)
            ratio[r] = rate[s][r] / rate[0][r];
        qsort(ratio, ROUNDS, sizeof(double), by_value);
        qsort(rate[s], ROUNDS, sizeof(double), by_value);
        printf("%-50s %6.0f GFLOP/s  %.2f of registers (rounds %.2f-%.2f)\n", names[s], rate[s][ROUNDS / 2],
               ratio[ROUNDS / 2], ratio[0], ratio[ROUNDS - 1]);
    }
    return 0;
}
