/* The dtype table (dtype.h). */
#include "glue.h"

#include <string.h>

#define MYATT_ROW_(arg, suffix, typenum, name, size) \
    {typenum, name, size, MYATT_DTYPE_##suffix},

const myatt_dtype myatt_dtypes[MYATT_NDTYPES] = {MYATT_DTYPES(MYATT_ROW_, ~)};

const myatt_dtype *dtype_of_name(const char *name)
{
    for (int i = 0; i < MYATT_NDTYPES; i++)
        if (strcmp(myatt_dtypes[i].name, name) == 0)
            return &myatt_dtypes[i];
    return NULL;
}

const char *dtype_names(void)
{
    /* "a, b or c", built once from the rows */
    static char names[16 * MYATT_NDTYPES];
    if (names[0] == '\0') {
        for (int i = 0; i < MYATT_NDTYPES; i++) {
            if (i > 0)
                strcat(names, i == MYATT_NDTYPES - 1 ? " or " : ", ");
            strcat(names, myatt_dtypes[i].name);
        }
    }
    return names;
}
