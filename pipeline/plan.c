/* plan.c - the plan stage: the rewritten graph becomes a model (finalized,
 * its plans made as it runs), whose weights stay charged to the load's
 * account. */
#include "pipeline.h"
#include "model.h"
#ifdef SLIM_HAVE_DNNL
#include "conv_dnnl.h"
#endif

slim_status slim_pipeline_plan(slim_graph *g, const slim_load_ctx *c, slim_mem_account *acct,
                               slim_model **out, slim_err *err)
{
    slim_status st = slim_model_from_graph(g, out, err);
    if (st)
        return st;
    slim_mem_account_unref((*out)->account);
    (*out)->account = acct;
    slim_mem_account_ref(acct);
    (*out)->fp32_strict = c->fp32_strict;
#ifdef SLIM_HAVE_DNNL
    /* Before any run, and under the load's account: the weights the
     * model will hold are the ones counted (the prediction runs this
     * stage too). */
    st = slim_fconv_store_winograd(*out, err);
    if (st) {
        slim_model_free(*out);
        *out = NULL;
        return st;
    }
#endif
    return SLIM_OK;
}
