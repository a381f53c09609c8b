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
static inline int omp_get_max_threads(void) { return 1; }
static inline void omp_set_num_threads(int n) { (void)n; }
#endif

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
