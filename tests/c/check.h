/* CHECK(cond), the assertion of the C, C++ and CUDA test clients (tests/c/, tests/gpu_clients/):
 * every check is counted, and a failed one prints "FAILED file:line: cond" on stderr and exits
 * with status 1. Clients include it by its path relative to their own file ("check.h",
 * "../c/check.h"), so no compiler flag is needed. By default the count is `checks`, a static int
 * defined here that the client prints ("ok: N checks"). A client that differs defines, before
 * including this file:
 *   CHECK_COUNT()    what each check counts (instead of ++checks; `checks` is then not defined);
 *   CHECK_DETAIL()   prints more of the failure line, after the condition (default: nothing);
 *   CHECK_FAILED()   what a failed check does once printed (default: exit(1)). */
#ifndef LLAISYS_TEST_CHECK_H
#define LLAISYS_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifndef CHECK_COUNT
static int checks = 0;
#define CHECK_COUNT() (++checks)
#endif
#ifndef CHECK_DETAIL
#define CHECK_DETAIL() ((void)0)
#endif
#ifndef CHECK_FAILED
#define CHECK_FAILED() exit(1)
#endif

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        CHECK_COUNT();                                                                        \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FAILED %s:%d: %s", __FILE__, __LINE__, #cond);                   \
            CHECK_DETAIL();                                                                   \
            fputc('\n', stderr);                                                              \
            CHECK_FAILED();                                                                   \
        }                                                                                     \
    } while (0)

#endif
