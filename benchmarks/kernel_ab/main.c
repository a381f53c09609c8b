/* harness PLAN [SECONDS] [SRC_OFFSET] [PLAN_B]: times run_a and run_b (two copies of the kernel source, see
   build.sh) on one plan, in alternating pairs of samples in one process, and prints each one's best and
   median time and the median of B's time / A's over the pairs. With PLAN_B, run_b runs that plan instead
   (two plans of one shape, e.g. another unit order). SRC_OFFSET: bytes the source starts past a cache
   line (NumPy's buffers start 0, 16, 32 or 48 bytes into one). Also says whether both give the same bits.
   The field lists below follow synet_deconv_plan (deconvolution.h): a field added there must be added
   here. */
#include "deconvolution.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*run_fn)(const synet_deconv_plan *, const void *, void *, void *);
void run_a(const synet_deconv_plan *, const void *, void *, void *);
void run_b(const synet_deconv_plan *, const void *, void *, void *);

#define WARM_S 0.01 /* untimed calls before each sample: both variants run back to back, no idle in between */
#define MAX_PAIRS 4000

static synet_deconv_plan plan_a, plan_b;
static long long packed_size, src_size;
static const void *src;
static void *buf, *dst;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void parse(const char *path, synet_deconv_plan *p)
{
    char kind[4], name[64];
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    while (fscanf(f, "%3s %63s", kind, name) == 2) {
        long long v, n;
        if (kind[0] == 's') {
            if (fscanf(f, "%lld", &v) != 1)
                exit(1);
#define SCALAR(x) if (!strcmp(name, #x)) p->x = v;
            SCALAR(impl) SCALAR(micro) SCALAR(wide_weights) SCALAR(lanes) SCALAR(src_bf16) SCALAR(dst_bf16) SCALAR(nhwc) SCALAR(direct) SCALAR(act)
            SCALAR(buf_size) SCALAR(batch) SCALAR(src_c) SCALAR(src_d) SCALAR(src_h) SCALAR(src_w) SCALAR(dst_c)
            SCALAR(dst_d) SCALAR(dst_h) SCALAR(dst_w) SCALAR(group) SCALAR(cg_in) SCALAR(cg_out) SCALAR(kernel_z)
            SCALAR(kernel_y) SCALAR(kernel_x) SCALAR(dilation_z) SCALAR(dilation_y) SCALAR(dilation_x)
            SCALAR(stride_z) SCALAR(stride_y) SCALAR(stride_x) SCALAR(pad_front) SCALAR(pad_top) SCALAR(pad_left)
            SCALAR(padded_d) SCALAR(padded_h) SCALAR(padded_w) SCALAR(pad_low_z) SCALAR(pad_low_y)
            SCALAR(pad_low_x) SCALAR(cg_padded) SCALAR(pixel_stride) SCALAR(padded_image) SCALAR(kpairs)
            SCALAR(block_width) SCALAR(weight_strip) SCALAR(nblocks) SCALAR(nrows) SCALAR(nunits) SCALAR(amx_runs) SCALAR(ntasks)
            SCALAR(row_run) SCALAR(stream) SCALAR(dst_image) SCALAR(pad_rows) SCALAR(nborder_x)
            if (!strcmp(name, "packed_size") && v > packed_size) /* the larger of the two plans' */
                packed_size = v;
            if (!strcmp(name, "src_size") && v > src_size)
                src_size = v;
        } else {
            if (fscanf(f, "%lld", &n) != 1)
                exit(1);
            int64_t *t = malloc(8 * (n + 1));
            for (long long i = 0; i < n; i++)
                if (fscanf(f, "%lld", (long long *)&t[i]) != 1)
                    exit(1);
#define TABLE(x) if (!strcmp(name, #x)) p->x = t;
            TABLE(phase_taps) TABLE(phase_tap0) TABLE(tap_offsets) TABLE(tap_kz) TABLE(tap_ky) TABLE(tap_kx)
            TABLE(col_first) TABLE(col_count) TABLE(unit_s0)
            TABLE(unit_s1) TABLE(unit_ob) TABLE(run_unit0) TABLE(seg_aoff) TABLE(seg_doff) TABLE(seg_m)
            TABLE(seg_phase) TABLE(border_z) TABLE(border_y) TABLE(border_x) TABLE(weight_offsets)
        }
    }
    fclose(f);
}

static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static float uniform(float scale) { return (rand() / (float)RAND_MAX - 0.5f) * scale; }

static double sample(run_fn f, int calls)
{
    const synet_deconv_plan *p = f == run_b ? &plan_b : &plan_a;
    const double warm_end = now() + WARM_S;
    while (now() < warm_end)
        f(p, src, buf, dst);
    const double start = now();
    for (int i = 0; i < calls; i++)
        f(p, src, buf, dst);
    return (now() - start) / calls;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: harness PLAN [SECONDS] [SRC_OFFSET] [PLAN_B]\n");
        return 2;
    }
    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
    parse(argv[1], &plan_a);
    plan_b = plan_a;
    if (argc > 4)
        parse(argv[4], &plan_b);
    const double seconds = argc > 2 ? atof(argv[2]) : 5;
    const int offset = argc > 3 ? atoi(argv[3]) : 0;

    srand(1);
    uint16_t *weights = aligned_alloc(64, (packed_size * 2 + 127) / 64 * 64);
    float *depthwise = aligned_alloc(64, (packed_size * 4 + 127) / 64 * 64); /* depthwise / planar plans' FP32 weights */
    for (long long i = 0; i < packed_size; i++) {
        weights[i] = bf16_bits(uniform(0.4f));
        memcpy(&depthwise[i], &(uint32_t){(uint32_t)weights[i] << 16}, 4);
    }
    char *source = aligned_alloc(64, (src_size * 4 + 127) / 64 * 64);
    for (long long i = 0; i < src_size; i++) {
        const float x = uniform(4.0f);
        if (plan_a.src_bf16)
            ((uint16_t *)(source + offset))[i] = bf16_bits(x);
        else
            ((float *)(source + offset))[i] = x;
    }
    float *bias = aligned_alloc(64, (plan_a.dst_c * 4 + 127) / 64 * 64);
    for (int i = 0; i < plan_a.dst_c; i++)
        bias[i] = i * 0.01f;
    synet_deconv_plan *plans[2] = {&plan_a, &plan_b};
    for (int k = 0; k < 2; k++) {
        plans[k]->weights = weights;
        plans[k]->depthwise = depthwise;
        plans[k]->bias = plans[k]->params = bias;
    }
    src = source + offset;
    const long long buf_size = plan_a.buf_size > plan_b.buf_size ? plan_a.buf_size : plan_b.buf_size;
    buf = aligned_alloc(64, (buf_size + 191) / 64 * 64);
    const size_t dst_bytes = plan_a.batch * plan_a.dst_image * (plan_a.dst_bf16 ? 2 : 4);
    dst = aligned_alloc(64, (dst_bytes + 127) / 64 * 64);

    char *ref = malloc(dst_bytes);
    run_a(&plan_a, src, buf, dst);
    memcpy(ref, dst, dst_bytes);
    memset(dst, 0, dst_bytes);
    run_b(&plan_b, src, buf, dst);
    const int same = !memcmp(ref, dst, dst_bytes);

    const int calls = (int)(0.01 / sample(run_a, 3)) + 1;
    static double ta[MAX_PAIRS], tb[MAX_PAIRS], ratio[MAX_PAIRS];
    int k = 0;
    for (const double end = now() + seconds; now() < end && k < MAX_PAIRS; k++) {
        if (k & 1) {
            tb[k] = sample(run_b, calls);
            ta[k] = sample(run_a, calls);
        } else {
            ta[k] = sample(run_a, calls);
            tb[k] = sample(run_b, calls);
        }
        ratio[k] = tb[k] / ta[k];
    }
    qsort(ta, k, 8, by_value);
    qsort(tb, k, 8, by_value);
    qsort(ratio, k, 8, by_value);
    printf("%s: same bits %s; %d pairs; A best %.1f median %.1f us; B best %.1f median %.1f us; "
           "B/A median %.3f (quartiles %.3f, %.3f)\n", argv[1], same ? "yes" : "NO", k, ta[0] * 1e6, ta[k / 2] * 1e6,
           tb[0] * 1e6, tb[k / 2] * 1e6, ratio[k / 2], ratio[k / 4], ratio[3 * k / 4]);
    return 0;
}
