/* Which CPU levels this machine runs (CPUID + XGETBV), and Linux's AMX permission. */
#ifndef SYNET_CPU_H
#define SYNET_CPU_H

/* The highest SYNET_LEVEL_* whose instructions the CPU has and the OS has enabled the register
   state for (AMX: the tile state is enabled by the OS, permission is asked separately). */
int synet_cpu_level(void);

/* Ask Linux for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM) once per process:
   1 when granted (or already granted), 0 when refused or not Linux / not x86-64. */
int synet_amx_permission(void);

#endif
