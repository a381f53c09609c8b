/* The opaque plan types of synet's public Cython API (synet/capi.pxd): a downstream extension holds
 * pointers to them and never sees their fields, so kernel refactors do not change its ABI. */
#ifndef SYNET_CAPI_H
#define SYNET_CAPI_H

#include "common.h"

typedef struct synet_gather_plan_opaque synet_gather_plan_t;
typedef struct synet_quantized_add_plan_opaque synet_quantized_add_plan_t;
typedef struct synet_deconvolution_plan_opaque synet_deconvolution_plan_t;

#endif
