/* OpenMP's thread settings for the Cython modules (compiled with -fopenmp when the compiler has it; serial
   stand-ins otherwise), and fork safety. Header only: _kernels.pyx includes it. */
#ifndef SYNET_THREADS_H
#define SYNET_THREADS_H

#ifdef _OPENMP
#include <omp.h>
#include <pthread.h>
#define SYNET_OPENMP 1
#else
#define SYNET_OPENMP 0
static inline void omp_set_num_threads(int n) { (void)n; }
#endif

/* The threads a parallel region of the calling thread gets without a num_threads clause: OpenMP's count
   (nthreads-var: OMP_NUM_THREADS, omp_set_num_threads, threadpoolctl's limits), within OMP_THREAD_LIMIT, 1 when
   OMP_MAX_ACTIVE_LEVELS=0 makes every region inactive, and at most `cap` (synet's 1024: a count from the
   environment such as OMP_NUM_THREADS=100000 made libgomp crash starting the threads). */
static inline int synet_default_threads(int cap)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    if (omp_get_thread_limit() < n)
        n = omp_get_thread_limit();
    if (omp_get_max_active_levels() < 1)
        n = 1;
    return n < 1 ? 1 : (n > cap ? cap : n);
#else
    (void)cap;
    return 1;
#endif
}

/* The CPUs this process may run on, for negative thread counts: OpenMP's count (the process's affinity when
   libgomp started; the calling thread's own mask is narrowed to one place under OMP_PROC_BIND / OMP_PLACES /
   GOMP_CPU_AFFINITY), or 0 without OpenMP (the caller asks the OS). */
static inline int synet_openmp_cpus(void)
{
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 0;
#endif
}

#if defined(_OPENMP) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9))
/* Before a fork: release the forking thread's OpenMP worker threads (OpenMP 5.0's omp_pause_resource_all;
   GNU libgomp drops the calling thread's pool). GNU libgomp is not fork-safe: a child forked after its parent
   ran a parallel region of 2+ threads inherits a pool whose threads do not exist in it, and its first parallel
   region waits for them for ever (multiprocessing's default "fork" start method, os.fork, prefork servers).
   With the pool released, parent and child each start new threads at their next parallel region (the parent
   pays that once a fork, tens of microseconds). */
static void synet_release_threads_before_fork(void) { (void)omp_pause_resource_all(omp_pause_soft); }

/* Installs that handler (pthread_atfork: every fork, Python's and C's); 0 on success. */
static inline int synet_install_fork_handler(void)
{
    return pthread_atfork(synet_release_threads_before_fork, NULL, NULL);
}
#else
static inline int synet_install_fork_handler(void) { return 0; }
#endif

#endif
