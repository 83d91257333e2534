/*
 * footprint.h - what a model takes in memory: predicted before loading, and
 * measured on a loaded model, in the same fields, so a memory budget (the
 * server's, `slim inspect --fit`) can decide before it loads and show
 * "predicted" next to "actual" after.
 *
 *     slim_footprint fp;
 *     slim_model_predict(path, &opts, max_batch, &fp, &err);   (before loading)
 *     slim_model_footprint(m, max_batch, &fp);                  (a loaded model)
 *
 * docs/memory.md ("Footprints") says what each figure counts and where the
 * prediction is exact and where it estimates.
 */
#ifndef SLIM_FOOTPRINT_H
#define SLIM_FOOTPRINT_H

#include "slim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct slim_footprint {
    size_t weight_bytes;     /* weights after compression (mapped or allocated) */
    size_t arena_bytes_1;    /* planned activation arena(s) at batch 1 */
    size_t arena_bytes_max;  /* at max_batch */
    size_t workspace_bytes;  /* kernel scratch / workspace the model's runs take */
    size_t total_bytes;      /* weight_bytes + arena_bytes_max + workspace_bytes: what a budget counts */
    /* Beyond the first interface: */
    size_t mapped_bytes;     /* of weight_bytes, mapped from a .slim file (not allocated) */
    size_t output_bytes_max; /* graph outputs of one run at max_batch (in arena_bytes_max) */
    int64_t max_batch;       /* the batch arena_bytes_max is for */
    /* The arenas could not be planned (an input of unknown type or rank,
     * shapes the planner cannot see through): arena figures are then 0. */
    bool unplanned;
    /* workspace_bytes was measured (runs on zeros at two batches, see
     * below); false when those runs failed and it is 0 for want of them. */
    bool workspace_measured;
} slim_footprint;

/* Before loading: from the file (ONNX or .slim) and the load options
 * (precision, pruning, device). max_batch < 1 counts as 1.
 *
 * It runs the load's stages up to plan (read, compress, optimize; not
 * place), under an account of its own, takes the figures of
 * slim_model_footprint and frees everything, giving it back
 * (slim_memory_give_back). A .slim file is mapped, never copied. An ONNX
 * file at fp32 or half precision is read weightless (its big initializers
 * as zero pages: their sizes, not their bytes), since those passes size
 * weights from shapes; int8 and pruning decide sizes from the values, so
 * there its weights are read and held while the passes run, as a load
 * would (a peak the size of the load's, then nothing); SLIM_PREDICT_DRY=1
 * reads them always (A/B). Exact for weights and arenas;
 * the workspace is measured at batch 1 and (up to) max_batch and extended
 * in a straight line (slim_model_measure_workspace: 2 x SLIM_FOOTPRINT_RUNS
 * runs, the costly part for a large model: cache predictions per file and
 * options). The model is run batch-invariant when max_batch > 1, as a
 * batching server runs it. */
slim_status slim_model_predict(const char *path, const slim_load_opts *opts, int64_t max_batch,
                               slim_footprint *out, slim_err *err);

/* What a loaded model holds now, same fields (for "actual" next to
 * "predicted"): weights and arenas, from the model and its plans, without
 * running it; workspace_bytes 0 (workspace_measured false) until
 * slim_model_measure_workspace. Cheap: plans only. */
void slim_model_footprint(const slim_model *m, int64_t max_batch, slim_footprint *out);

/* Fills fp's workspace_bytes (and total_bytes) by running the model on
 * zeros at batch 1 and at a second batch (fp->max_batch when its runs fit
 * the bounds below, else the largest halving of it that does, at least
 * 2), SLIM_FOOTPRINT_RUNS times each, reading its account's peak (set back
 * after) and extending the two in a straight line to fp->max_batch. Costs those runs: call it before the model takes
 * traffic (other runs' memory would count as workspace). The runs' arenas
 * are given back after. */
#define SLIM_FOOTPRINT_RUNS 2
/* The CPU time (the process's, all threads) all of those runs may take:
 * the second batch is the largest whose runs, at batch 1's CPU time per
 * row, fit what the runs at batch 1 left of it. CPU time, so a machine
 * busy with other processes chooses what a quiet one does and the
 * prediction does not move with its load. The runs are cancelled (a slow
 * model's workspace then stays unmeasured, workspace_measured false) when
 * those at batch 1 are past this in CPU time and in wall time both, all of
 * them past twice it, or past the outer bounds below. */
#define SLIM_FOOTPRINT_RUN_MS 1000
/* The last resort, in wall time: all the runs together are cancelled past
 * this or the caller's own deadline, whichever comes first (a caller's
 * cancellation, a server's shutdown, is passed on too). Many times the CPU
 * budget, so a loaded machine's slower wall clock does not cancel what a
 * quiet one measures. */
#define SLIM_FOOTPRINT_WALL_MS 10000
/* Nor are they made when a run at either batch would take more than the
 * weights or this, whichever is more; while they run the account is
 * limited to what it held plus twice that (unless it had a limit). */
#define SLIM_FOOTPRINT_RUN_MIN_CAP ((size_t)64 << 20)
void slim_model_measure_workspace(const slim_model *m, slim_footprint *fp);

/* The run bytes alone at batch (0 when the shapes cannot be planned): the
 * planned arena plus the graph outputs, which the arena does not hold but
 * the run allocates. The inputs are the caller's (a server's request). */
size_t slim_model_run_bytes(const slim_model *m, int64_t batch, size_t *output_bytes);

#endif
