/* load.c - slim_model_load: the stages of pipeline.h, in order, under the
 * memory account that the model's weights are charged to. */
#include "pipeline.h"
#include "model.h"
#include "slim_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* read -> compress -> optimize (+ lower) -> plan -> place. */
static slim_status run_stages(slim_load_ctx *c, slim_mem_account *acct, slim_model **out,
                              slim_err *err)
{
    slim_graph *g = NULL;
    /* The error check's samples come from a float32 run of its own copy of
     * the model, done and freed before this load holds any weights. */
    slim_status st = slim_pipeline_samples(c, err);
    if (!st)
        st = slim_pipeline_read(c->path, &g, err);
    if (!st)
        st = slim_pipeline_compress(g, c, err);
    if (!st)
        st = slim_pipeline_optimize(g, c, err);
    if (!st)
        st = slim_pipeline_plan(g, c, acct, out, err);
    if (!st)
        st = slim_pipeline_place(out, c, err);
    slim_int8_samples_free(&c->samples);
    return st;
}

slim_status slim_model_load(const char *path, const slim_load_opts *opts, slim_model **out,
                            slim_err *err)
{
    static const slim_load_opts defaults;
    *out = NULL;
    slim_init(); /* a library caller may not have: loading needs the backends */
    slim_load_ctx c = {.path = path};
    slim_status st = slim_pipeline_settings(opts ? opts : &defaults, &c, err);
    if (st)
        return st;
    if (!path || !path[0])
        return slim_errf(err, SLIM_EINVAL, "no model path given");
    /* The weights are charged to the model's account as they are read. */
    const char *base = strrchr(path, '/');
    char label[128];
    snprintf(label, sizeof(label), "model \"%s\"", base ? base + 1 : path);
    slim_mem_account *acct = slim_mem_account_new(label, 0);
    if (!acct)
        return slim_errf(err, SLIM_ENOMEM, "out of memory loading %s", path);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    st = run_stages(&c, acct, out, err);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct); /* the model holds its own reference */
    /* The load's peak (float32 weights before conversion, the decoded
     * protobuf, the passes' scratch) goes back now, not at the next
     * pressure: an idle server holds what its models hold (alloc.h). */
    slim_memory_give_back();
    if (st)
        return st;
    (*out)->path = strdup(path);
    if (!(*out)->path) {
        slim_model_free(*out);
        *out = NULL;
        return slim_errf(err, SLIM_ENOMEM, "out of memory loading %s", path);
    }
    return SLIM_OK;
}
