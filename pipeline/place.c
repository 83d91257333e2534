/* place.c - the place stage: each node of the model onto the load's device
 * where it has a kernel there (runtime/partition.c). */
#include "pipeline.h"
#include "model.h"

slim_status slim_pipeline_place(slim_model **m, const slim_load_ctx *c, slim_err *err)
{
    slim_status st = slim_model_place(*m, c->dev, err);
    if (st) {
        slim_model_free(*m);
        *m = NULL;
    }
    return st;
}

slim_status slim_pipeline_device(const slim_place_opts *o, slim_device **dev, slim_err *err)
{
    *dev = NULL;
    return o->device ? slim_device_get(o->device, dev, err) : SLIM_OK;
}
