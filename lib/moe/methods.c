/* Which CPU MoE methods this build has kernels for (feeds kt_features()). */
#include "kt_internal.h"

uint64_t kt__methods_compiled(void);

uint64_t kt__methods_compiled(void)
{
    return 0;
}
