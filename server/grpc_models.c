/*
 * grpc_models.c - the gRPC RPCs about one model or all of them, answered
 * at once from the repository and the counters: ModelMetadata,
 * ModelConfig (Triton's ModelConfig message, reduced to what slimserve
 * fills) and ModelStatistics (stats.c's figures, in Triton's messages).
 */
#include "config.h"
#include "grpc_impl.h"
#include "inference.pb-c.h"
#include "metrics.h"
#include "repository.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MODELS 4096

static void fill_tensor_meta(Inference__ModelMetadataResponse__TensorMetadata *t, int64_t *shape,
                             const slim_server_io *io, bool batch)
{
    inference__model_metadata_response__tensor_metadata__init(t);
    const char *type = slim_server_dtype_kserve(io->dtype);
    t->name = io->name;
    t->datatype = (char *)(type ? type : "INVALID");
    size_t n = 0;
    if (batch || io->ndim < 0)
        shape[n++] = -1;
    for (int d = 0; d < io->ndim; d++)
        shape[n++] = io->dims[d];
    t->n_shape = n;
    t->shape = shape;
}

void slim__grpc_model_metadata(slim__grpc_call *c)
{
    Inference__ModelMetadataRequest *q = (void *)slim__grpc_unpack(c, &inference__model_metadata_request__descriptor);
    if (!q)
        return;
    slim_server_model *m = slim__grpc_acquire(c, q->name, q->version);
    inference__model_metadata_request__free_unpacked(q, NULL);
    if (!m)
        return;
    int64_t versions[256];
    int nv = slim_server_repo_ready_versions(&c->g->srv->repo, m->name, versions, 256);
    char vbuf[256][24], *vptr[256];
    for (int i = 0; i < nv; i++) {
        snprintf(vbuf[i], sizeof(vbuf[i]), "%lld", (long long)versions[i]);
        vptr[i] = vbuf[i];
    }
    int ni = m->cfg.n_inputs, no = m->cfg.n_outputs;
    Inference__ModelMetadataResponse__TensorMetadata *ts = calloc((size_t)(ni + no + 1), sizeof(*ts));
    Inference__ModelMetadataResponse__TensorMetadata **tp = calloc((size_t)(ni + no + 1), sizeof(*tp));
    int64_t *shapes = calloc((size_t)(ni + no + 1) * (SLIM_MAX_DIMS + 1), sizeof(*shapes));
    if (!ts || !tp || !shapes) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        bool batch = m->cfg.max_batch_size > 0;
        for (int i = 0; i < ni + no; i++) {
            const slim_server_io *io = i < ni ? &m->cfg.inputs[i] : &m->cfg.outputs[i - ni];
            fill_tensor_meta(&ts[i], shapes + (size_t)i * (SLIM_MAX_DIMS + 1), io, batch);
            tp[i] = &ts[i];
        }
        Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
        r.name = m->name;
        r.n_versions = (size_t)nv;
        r.versions = vptr;
        r.platform = m->cfg.platform ? m->cfg.platform : "";
        r.n_inputs = (size_t)ni;
        r.inputs = tp;
        r.n_outputs = (size_t)no;
        r.outputs = tp + ni;
        slim__grpc_reply(c, &r.base);
    }
    free(ts);
    free(tp);
    free(shapes);
    slim_server_model_release(m);
}

/* ---- model configuration ------------------------------------------------ */

static int data_type_enum(slim_dtype t)
{
    const char *name = slim_server_dtype_triton(t);
    const ProtobufCEnumValue *v =
        name ? protobuf_c_enum_descriptor_get_value_by_name(&inference__data_type__descriptor, name)
             : NULL;
    return v ? v->value : INFERENCE__DATA_TYPE__TYPE_INVALID;
}

void slim__grpc_model_config(slim__grpc_call *c)
{
    Inference__ModelConfigRequest *q = (void *)slim__grpc_unpack(c, &inference__model_config_request__descriptor);
    if (!q)
        return;
    slim_server_model *m = slim__grpc_acquire(c, q->name, q->version);
    inference__model_config_request__free_unpacked(q, NULL);
    if (!m)
        return;
    const slim_server_config *cfg = &m->cfg;
    int ni = cfg->n_inputs, no = cfg->n_outputs;
    Inference__ModelInput *ins = calloc((size_t)ni + 1, sizeof(*ins));
    Inference__ModelInput **inp = calloc((size_t)ni + 1, sizeof(*inp));
    Inference__ModelOutput *outs = calloc((size_t)no + 1, sizeof(*outs));
    Inference__ModelOutput **outp = calloc((size_t)no + 1, sizeof(*outp));
    if (!ins || !inp || !outs || !outp) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        goto done;
    }
    for (int i = 0; i < ni; i++) {
        inference__model_input__init(&ins[i]);
        ins[i].name = cfg->inputs[i].name;
        ins[i].data_type = data_type_enum(cfg->inputs[i].dtype);
        ins[i].n_dims = cfg->inputs[i].ndim > 0 ? (size_t)cfg->inputs[i].ndim : 0;
        ins[i].dims = (int64_t *)cfg->inputs[i].dims;
        inp[i] = &ins[i];
    }
    for (int i = 0; i < no; i++) {
        inference__model_output__init(&outs[i]);
        outs[i].name = cfg->outputs[i].name;
        outs[i].data_type = data_type_enum(cfg->outputs[i].dtype);
        outs[i].n_dims = cfg->outputs[i].ndim > 0 ? (size_t)cfg->outputs[i].ndim : 0;
        outs[i].dims = (int64_t *)cfg->outputs[i].dims;
        outp[i] = &outs[i];
    }
    Inference__ModelInstanceGroup group = INFERENCE__MODEL_INSTANCE_GROUP__INIT, *groups = &group;
    group.count = cfg->instance_count;
    group.kind = cfg->device && strncmp(cfg->device, "cuda", 4) == 0
                     ? INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU
                     : INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
    Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
    db.n_preferred_batch_size = (size_t)cfg->batching.n_preferred;
    db.preferred_batch_size = (int32_t *)cfg->batching.preferred;
    db.max_queue_delay_microseconds = (uint64_t)cfg->batching.max_queue_delay_us;
    Inference__ModelConfig mc = INFERENCE__MODEL_CONFIG__INIT;
    mc.name = cfg->name ? cfg->name : m->name;
    mc.platform = cfg->platform ? cfg->platform : "";
    mc.max_batch_size = cfg->max_batch_size;
    mc.n_input = (size_t)ni;
    mc.input = inp;
    mc.n_output = (size_t)no;
    mc.output = outp;
    mc.n_instance_group = 1;
    mc.instance_group = &groups;
    mc.dynamic_batching = cfg->batching.enabled ? &db : NULL;
    Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    r.config = &mc;
    slim__grpc_reply(c, &r.base);
done:
    free(ins);
    free(inp);
    free(outs);
    free(outp);
    slim_server_model_release(m);
}

/* ---- statistics (stats.c's figures) ------------------------------------- */

typedef struct stat_bufs {
    Inference__ModelStatistics st;
    Inference__InferStatistics is;
    Inference__StatisticDuration d[6];
    Inference__InferBatchStatistics *bs, **bsp;
    Inference__StatisticDuration *bd;
    char version[24];
} stat_bufs;

static void duration(Inference__StatisticDuration *d, uint64_t count, uint64_t ns)
{
    inference__statistic_duration__init(d);
    d->count = count;
    d->ns = ns;
}

static void fill_stat(stat_bufs *b, const slim_server_model *m)
{
    slim_server_stats *s = m->stats;
    inference__model_statistics__init(&b->st);
    inference__infer_statistics__init(&b->is);
    snprintf(b->version, sizeof(b->version), "%lld", (long long)m->version);
    uint64_t success = atomic_load(&s->success), fail = 0;
    for (int r = 0; r < SLIM_SERVER_FAIL_COUNT; r++)
        fail += atomic_load(&s->failure[r]);
    b->st.name = m->name;
    b->st.version = b->version;
    b->st.last_inference = atomic_load(&s->last_inference_ms);
    b->st.inference_count = atomic_load(&s->inference_count);
    b->st.execution_count = atomic_load(&s->execution_count);
    duration(&b->d[0], success, 1000 * atomic_load(&s->success_us));
    duration(&b->d[1], fail, 1000 * atomic_load(&s->fail_us));
    duration(&b->d[2], success, 1000 * atomic_load(&s->queue_us));
    duration(&b->d[3], success, atomic_load(&s->input_ns));
    duration(&b->d[4], success, atomic_load(&s->infer_ns));
    duration(&b->d[5], success, atomic_load(&s->output_ns));
    b->is.success = &b->d[0];
    b->is.fail = &b->d[1];
    b->is.queue = &b->d[2];
    b->is.compute_input = &b->d[3];
    b->is.compute_infer = &b->d[4];
    b->is.compute_output = &b->d[5];
    b->st.inference_stats = &b->is;
    slim_server_batch_stat *t = atomic_load(&s->batch_stats);
    if (!t)
        return;
    b->bs = calloc(SLIM_SERVER_BATCH_STAT_SLOTS, sizeof(*b->bs));
    b->bsp = calloc(SLIM_SERVER_BATCH_STAT_SLOTS, sizeof(*b->bsp));
    b->bd = calloc(SLIM_SERVER_BATCH_STAT_SLOTS * 3, sizeof(*b->bd));
    if (!b->bs || !b->bsp || !b->bd)
        return;
    size_t n = 0;
    for (int i = 0; i < SLIM_SERVER_BATCH_STAT_SLOTS; i++) {
        uint64_t count = atomic_load(&t[i].count);
        if (!count)
            continue;
        Inference__InferBatchStatistics *x = &b->bs[n];
        inference__infer_batch_statistics__init(x);
        x->batch_size = (uint64_t)atomic_load(&t[i].size);
        duration(&b->bd[3 * n], count, atomic_load(&t[i].input_ns));
        duration(&b->bd[3 * n + 1], count, atomic_load(&t[i].infer_ns));
        duration(&b->bd[3 * n + 2], count, atomic_load(&t[i].output_ns));
        x->compute_input = &b->bd[3 * n];
        x->compute_infer = &b->bd[3 * n + 1];
        x->compute_output = &b->bd[3 * n + 2];
        b->bsp[n++] = x;
    }
    /* By batch size, as the HTTP answer is. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && b->bsp[j - 1]->batch_size > b->bsp[j]->batch_size; j--) {
            Inference__InferBatchStatistics *tmp = b->bsp[j];
            b->bsp[j] = b->bsp[j - 1];
            b->bsp[j - 1] = tmp;
        }
    b->st.n_batch_stats = n;
    b->st.batch_stats = b->bsp;
}

void slim__grpc_model_statistics(slim__grpc_call *c)
{
    Inference__ModelStatisticsRequest *q =
        (void *)slim__grpc_unpack(c, &inference__model_statistics_request__descriptor);
    if (!q)
        return;
    slim_server_repo *repo = &c->g->srv->repo;
    slim_server_model **ms = NULL;
    int n = 0;
    int64_t v;
    const char *name = q->name && q->name[0] ? q->name : NULL;
    if (!slim__grpc_parse_version(q->version, &v)) {
        slim__grpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "model version \"%s\" is not a number",
                        q->version);
        goto out;
    }
    if (!(ms = calloc(MAX_MODELS, sizeof(*ms)))) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
        goto out;
    }
    if (name && v >= 0) {
        if (!(ms[0] = slim__grpc_acquire(c, name, q->version)))
            goto out;
        n = 1;
    } else {
        n = slim_server_repo_ready_models(repo, name, ms, MAX_MODELS);
        if (name && n == 0) {
            slim_server_model *m = slim__grpc_acquire(c, name, "");
            if (m) {
                slim_server_model_release(m);
                slim__grpc_fail(c, GRPC_STATUS_UNAVAILABLE, "model '%s' changed while its "
                                "statistics were read; ask again", name);
            }
            goto out;
        }
    }
    stat_bufs *bufs = calloc((size_t)n + 1, sizeof(*bufs));
    Inference__ModelStatistics **sp = calloc((size_t)n + 1, sizeof(*sp));
    if (!bufs || !sp) {
        slim__grpc_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            fill_stat(&bufs[i], ms[i]);
            sp[i] = &bufs[i].st;
        }
        Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
        r.n_model_stats = (size_t)n;
        r.model_stats = sp;
        slim__grpc_reply(c, &r.base);
        for (int i = 0; i < n; i++) {
            free(bufs[i].bs);
            free(bufs[i].bsp);
            free(bufs[i].bd);
        }
    }
    free(bufs);
    free(sp);
out:
    for (int i = 0; i < n; i++)
        slim_server_model_release(ms[i]);
    free(ms);
    inference__model_statistics_request__free_unpacked(q, NULL);
}
