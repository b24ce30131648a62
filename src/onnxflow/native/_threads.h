/* Plain threads for a compiled kernel's rows: the caller's thread and up to n - 1 more, started
   for one call and joined before it returns. Nothing waits by spinning: a started thread takes
   units of work from a shared counter until none is left, then ends. Without POSIX threads
   (Windows), the caller's thread does every unit. */
#ifndef ONNXFLOW_THREADS_H
#define ONNXFLOW_THREADS_H

#define OF_MAX_THREADS 64

#if defined(_WIN32)
static int of_parallel(void* (*fn)(void*), void* arg, int n) {
    (void)n;
    fn(arg);
    return 1;
}
static long of_next(long* counter) { return (*counter)++; }
static void of_add(long* counter, long value) { *counter += value; }
#else
#include <pthread.h>
/* fn(arg) on the caller's thread and on up to n - 1 started threads (fewer when the system
   starts fewer); returns once all have returned, with how many ran it. */
static int of_parallel(void* (*fn)(void*), void* arg, int n) {
    pthread_t threads[OF_MAX_THREADS];
    int started = 0, i;
    if (n > OF_MAX_THREADS) n = OF_MAX_THREADS;
    for (i = 1; i < n; i++) {
        if (pthread_create(&threads[started], NULL, fn, arg) != 0) break;
        started++;
    }
    fn(arg);
    for (i = 0; i < started; i++) pthread_join(threads[i], NULL);
    return started + 1;
}
/* The counter's value before adding one, atomically. */
static long of_next(long* counter) { return __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }
/* Add value to the counter, atomically. */
static void of_add(long* counter, long value) {
    __atomic_fetch_add(counter, value, __ATOMIC_RELAXED);
}
#endif

#endif
