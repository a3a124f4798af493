/*
 * kt/template.h - chat templates. (Module being written; declarations land here.)
 */
#ifndef KT_TEMPLATE_H
#define KT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* KT_TEMPLATE_H */
