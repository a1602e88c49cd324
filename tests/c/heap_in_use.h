/* The bytes in use on the heap (glibc's mallinfo2 uordblks; mallinfo before glibc 2.33), for
 * the host-only programs that check that the library keeps no memory. */
#ifndef HEAP_IN_USE_H
#define HEAP_IN_USE_H

#include <malloc.h>
#include <stddef.h>

static size_t heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    return mallinfo2().uordblks;
#else
    return (size_t)(unsigned)mallinfo().uordblks;
#endif
}

#endif /* HEAP_IN_USE_H */
