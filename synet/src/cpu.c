/* CPU level detection; compiled for the baseline (it runs before anything is known). */
#include "cpu.h"

#include "common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdio.h>
#include <string.h>

static uint64_t synet_xgetbv(void)
{
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

int synet_cpu_level(void)
{
    unsigned a, b, c, d;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    uint64_t xcr0 = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return SYNET_LEVEL_BASELINE;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    const int movbe = (c >> 22) & 1;
    if (osxsave)
        xcr0 = synet_xgetbv();
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        __cpuid_count(7, 1, a71, b, c, d);
    }
    unsigned ea = 0, eb, ec = 0, ed;
    if (__get_cpuid(0x80000001, &ea, &eb, &ec, &ed) == 0)
        ec = 0;
    const int lzcnt = (ec >> 5) & 1;
    const int ymm_state = (xcr0 & 0x6) == 0x6;           /* SSE + AVX state */
    const int zmm_state = (xcr0 & 0xE6) == 0xE6;         /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const int tile_state = (xcr0 & 0x60000) == 0x60000;  /* XTILECFG, XTILEDATA */
    const int avx2 = (b7 >> 5) & 1, bmi1 = (b7 >> 3) & 1, bmi2 = (b7 >> 8) & 1;
    if (!(avx && avx2 && fma && f16c && bmi1 && bmi2 && lzcnt && movbe && ymm_state))
        return SYNET_LEVEL_BASELINE;
    const int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 28) & 1) && ((b7 >> 30) & 1) &&
                       ((b7 >> 31) & 1); /* F, DQ, CD, BW, VL */
    if (!(avx512 && zmm_state))
        return SYNET_LEVEL_AVX2;
    const int bf16 = (a71 >> 5) & 1, vnni = (c7 >> 11) & 1;
    if (!(bf16 && vnni))
        return SYNET_LEVEL_AVX512;
    const int amx = ((d7 >> 22) & 1) && ((d7 >> 24) & 1); /* AMX-BF16, AMX-TILE */
    if (!(amx && tile_state))
        return SYNET_LEVEL_AVX512_BF16;
    return SYNET_LEVEL_AMX;
}

/* whether CPUID's vendor string is `name` (12 characters) */
static int vendor_is(const char *name)
{
    unsigned max, vendor[3];
    __cpuid(0, max, vendor[0], vendor[2], vendor[1]); /* EBX, EDX, ECX: the vendor string */
    (void)max;
    return memcmp(vendor, name, 12) == 0;
}

int synet_cpu_bf16_dot_fast(void) { return vendor_is("AuthenticAMD"); }

int synet_cpu_vector_gather_fast(void)
{
    if (!vendor_is("GenuineIntel"))
        return 0;
    char line[64] = "";
    FILE *f = fopen("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", "r");
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = 0;
        fclose(f);
    }
    return strncmp(line, "Mitigation", 10) != 0;
}
#else
int synet_cpu_level(void) { return SYNET_LEVEL_BASELINE; }
int synet_cpu_bf16_dot_fast(void) { return 0; }
int synet_cpu_vector_gather_fast(void) { return 0; }
#endif

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

int synet_amx_permission(void)
{
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18); idempotent, so racing threads are fine */
    static volatile int answer = -1;
    if (answer < 0)
        answer = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return answer;
}
#else
int synet_amx_permission(void) { return 0; }
#endif
