/* Reading a list of names from the environment (standalone: tests/test_listed.py compiles it). */
#ifndef SYNET_LISTED_H
#define SYNET_LISTED_H

#include <string.h>

/* whether `name` (lower case) is one of the comma-separated names in `list`, in any case, spaces around them
   ignored (as synet's other variables are read: "AVX512VBMI" and "avx2, avx512vbmi" were ignored) */
static inline int synet_listed(const char *list, const char *name)
{
    const size_t length = strlen(name);
    while (list && *list) {
        while (*list == ' ' || *list == '\t')
            ++list;
        size_t i = 0;
        while (i < length && list[i] && (list[i] | 0x20) == name[i]) /* (ASCII letters and digits) */
            ++i;
        const char *rest = list + i;
        while (*rest == ' ' || *rest == '\t')
            ++rest;
        if (i == length && (*rest == ',' || *rest == '\0'))
            return 1;
        list = strchr(list, ',');
        if (list)
            ++list;
    }
    return 0;
}

#endif
