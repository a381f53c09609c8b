/* Which CPU levels this machine runs (CPUID + XGETBV), and Linux's AMX permission. */
#ifndef SYNET_CPU_H
#define SYNET_CPU_H

/* The highest SYNET_LEVEL_* whose instructions the CPU has and the OS has enabled the register
   state for (AMX: the tile state is enabled by the OS, permission is asked separately). */
int synet_cpu_level(void);

/* Ask Linux for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM) once per process:
   1 when granted (or already granted), 0 when refused or not Linux / not x86-64. */
int synet_amx_permission(void);

/* 1 when this CPU's AVX512-BF16 dot products (vdpbf16ps) outpace its FP32 FMAs per FLOP, so that a
   deconvolution without AMX runs faster on them: AMD's (Zen 4: 494 against 268 GFLOP/s on one core);
   0 elsewhere (Intel Emerald Rapids: vdpbf16ps at 0.48x the FLOPs of its FMAs, the FP32 micro-kernel
   1.2-1.9x faster on every bench shape). Only a CPU that has the instructions asks. */
int synet_cpu_bf16_dot_fast(void);

/* 1 when this CPU's vpgatherdd / vpgatherdq load gathered elements faster than scalar loads do, so that
   GatherElements uses them (elements of every size): Intel's, unless Linux reports the microcode's
   mitigation of Gather Data Sampling ("Downfall", which slows gathers down several times: Skylake to Ice
   Lake) in /sys/devices/system/cpu/vulnerabilities/gather_data_sampling (Emerald Rapids: G1 1.5x faster);
   0 on AMD's (Zen 4: about one element a cycle, scalar loads 1.2x faster on G1) and elsewhere. */
int synet_cpu_vector_gather_fast(void);

#endif
