/* GatherElements: dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]. */
#ifndef SYNET_GATHER_H
#define SYNET_GATHER_H

#include "common.h"

/* One gather over src [outer, src_count, inner] and idx, dst [outer, idx_count, inner]. */
typedef struct synet_gather_job {
    const void *src, *idx;
    void *dst;
    synet_size outer, src_count, inner, idx_count;
    synet_size period; /* idx holds this many outer slices; slice b reads index slice b % period */
    int elem_size;     /* bytes per element: 1, 2, 4 or 8 */
    int index_size;    /* bytes per index: 4 or 8 */
    int offsets;       /* idx holds src offsets c * inner + i (set_index's, int32 or int64), still checked */
    int vector_gather; /* elements by vpgather, not scalar loads (synet_cpu_vector_gather_fast) */
    /* the task split, filled by `prepare` (it depends on the level's kernels, never on the threads) */
    synet_size ntasks, tasks_per_outer, slices_per_task, rows_per_task, nstrips;
    int strips, whole_slices, prefetch_next;
} synet_gather_job;

typedef struct synet_gather_kernels {
    const char *level;
    void (*prepare)(synet_gather_job *job);
    /* task t < job->ntasks; returns how many indices were out of range (their dst elements are 0) */
    synet_size (*task)(const synet_gather_job *job, synet_size t);
} synet_gather_kernels;

SYNET_DECLARE_TABLES(synet_gather_kernels, synet_gather_kernels)

#endif
