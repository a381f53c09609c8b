/* One copy of the deconvolution kernel source (the include path picks which), with one entry point,
   ENTRY(plan, src, buf, dst): a serial run as synet's deconv_run makes it (pad rows, tasks, AMX release;
   no exact-border pass: the harness's weights are finite). */
#include "deconvolution.c"

__attribute__((visibility("default"))) void ENTRY(const synet_deconv_plan *p, const void *src, void *buf, void *dst)
{
    int rows[16] = {0};
    char *image = (char *)buf + ((64 - (uintptr_t)buf % 64) % 64);
    for (synet_size t = 0; t < p->pad_rows; ++t)
        pad_row(p, src, image, t);
    for (synet_size t = 0; t < p->ntasks; ++t)
        task(p, src, image, dst, t, rows);
#if HAVE_AMX
    if (p->micro == SYNET_MICRO_AMX)
        amx_release();
#endif
}
