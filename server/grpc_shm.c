/*
 * grpc_shm.c - the shared-memory RPCs (SystemSharedMemory{Status,Register,
 * Unregister}, CudaSharedMemory{...}): the same table as the HTTP
 * endpoints (shm.c), so a region registered over one protocol is used
 * and listed over the other. Each answers at once, on the completion-queue
 * thread: mapping a region is a few system calls, never a wait for a model.
 * Status and unregister differ between the kinds only in their messages:
 * one helper each (status_list, unregister) serves both.
 */
#include "grpc_impl.h"
#include "inference.pb-c.h"
#include "shm.h"

#include <stdlib.h>

/* The status code Triton's HTTP endpoint gives, as gRPC. */
static void fail(slim__grpc_call *c, slim_status s, const slim_err *err)
{
    int http = s == SLIM_ENOTFOUND ? 404 : s == SLIM_ENOMEM ? 500 : 400;
    slim__grpc_fail(c, slim__grpc_code(http), "%s", err->msg);
}

static void answer_empty(slim__grpc_call *c, slim_status s, const slim_err *err,
                         const ProtobufCMessage *empty)
{
    if (s != SLIM_OK)
        fail(c, s, err);
    else
        slim__grpc_reply(c, empty);
}

/* The request's "name" (every status and unregister request, of either
 * kind, has one: "" for all regions); its descriptor says where it is, so
 * one helper serves both kinds' messages. */
static const char *request_name(const ProtobufCMessage *q)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(q->descriptor, "name");
    if (!f || f->type != PROTOBUF_C_TYPE_STRING || f->label == PROTOBUF_C_LABEL_REPEATED)
        return ""; /* not such a request: the caller's descriptor is wrong */
    return *(char *const *)((const char *)q + f->offset);
}

/* A status RPC's regions of kind (all, or the one the request names);
 * false with c answered when there are none to give. */
static bool status_list(slim__grpc_call *c, slim_server_shm_kind kind,
                        const ProtobufCMessageDescriptor *request, slim_server_shm_info **infos,
                        int *n)
{
    ProtobufCMessage *q = slim__grpc_unpack(c, request);
    if (!q)
        return false;
    slim_err err = {0};
    slim_status s = slim_server_shm_status(kind, request_name(q), infos, n, &err);
    protobuf_c_message_free_unpacked(q, NULL);
    if (s != SLIM_OK) {
        fail(c, s, &err);
        return false;
    }
    return true;
}

/* Both kinds' unregister answers are empty messages: one helper fills one. */
_Static_assert(sizeof(Inference__SystemSharedMemoryUnregisterResponse) == sizeof(ProtobufCMessage) &&
               sizeof(Inference__CudaSharedMemoryUnregisterResponse) == sizeof(ProtobufCMessage),
               "the unregister responses are empty messages");

static void unregister(slim__grpc_call *c, slim_server_shm_kind kind,
                       const ProtobufCMessageDescriptor *request,
                       const ProtobufCMessageDescriptor *response)
{
    ProtobufCMessage *q = slim__grpc_unpack(c, request);
    if (!q)
        return;
    slim_err err = {0};
    slim_status s = slim_server_shm_unregister(kind, request_name(q), &err);
    protobuf_c_message_free_unpacked(q, NULL);
    ProtobufCMessage r;
    protobuf_c_message_init(response, &r);
    answer_empty(c, s, &err, &r);
}

/* ---- system ------------------------------------------------------------- */

void slim__grpc_shm_system_status(slim__grpc_call *c)
{
    slim_server_shm_info *infos;
    int n;
    if (!status_list(c, SLIM_SHM_SYSTEM, &inference__system_shared_memory_status_request__descriptor,
                     &infos, &n))
        return;
    Inference__SystemSharedMemoryStatusResponse__RegionStatus *st = calloc((size_t)n + 1, sizeof(*st));
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry *ents = calloc((size_t)n + 1, sizeof(*ents));
    Inference__SystemSharedMemoryStatusResponse__RegionsEntry **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
    if (!st || !ents || !ptrs) {
        slim__grpc_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            inference__system_shared_memory_status_response__region_status__init(&st[i]);
            st[i].name = infos[i].name;
            st[i].key = infos[i].key;
            st[i].offset = infos[i].offset;
            st[i].byte_size = infos[i].byte_size;
            inference__system_shared_memory_status_response__regions_entry__init(&ents[i]);
            ents[i].key = infos[i].name;
            ents[i].value = &st[i];
            ptrs[i] = &ents[i];
        }
        Inference__SystemSharedMemoryStatusResponse r =
            INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        r.n_regions = (size_t)n;
        r.regions = ptrs;
        slim__grpc_reply(c, &r.base);
    }
    free(st);
    free(ents);
    free(ptrs);
    free(infos);
}

void slim__grpc_shm_system_register(slim__grpc_call *c)
{
    Inference__SystemSharedMemoryRegisterRequest *q =
        (void *)slim__grpc_unpack(c, &inference__system_shared_memory_register_request__descriptor);
    if (!q)
        return;
    slim_err err = {0};
    slim_status s = slim_server_shm_register_system(q->name, q->key, q->offset, q->byte_size, &err);
    inference__system_shared_memory_register_request__free_unpacked(q, NULL);
    Inference__SystemSharedMemoryRegisterResponse r =
        INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
    /* Register's failures are all the request's (a missing key included). */
    answer_empty(c, s == SLIM_ENOTFOUND ? SLIM_EINVAL : s, &err, &r.base);
}

void slim__grpc_shm_system_unregister(slim__grpc_call *c)
{
    unregister(c, SLIM_SHM_SYSTEM, &inference__system_shared_memory_unregister_request__descriptor,
               &inference__system_shared_memory_unregister_response__descriptor);
}

/* ---- CUDA --------------------------------------------------------------- */

void slim__grpc_shm_cuda_status(slim__grpc_call *c)
{
    slim_server_shm_info *infos;
    int n;
    if (!status_list(c, SLIM_SHM_CUDA, &inference__cuda_shared_memory_status_request__descriptor,
                     &infos, &n))
        return;
    Inference__CudaSharedMemoryStatusResponse__RegionStatus *st = calloc((size_t)n + 1, sizeof(*st));
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry *ents = calloc((size_t)n + 1, sizeof(*ents));
    Inference__CudaSharedMemoryStatusResponse__RegionsEntry **ptrs = calloc((size_t)n + 1, sizeof(*ptrs));
    if (!st || !ents || !ptrs) {
        slim__grpc_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (int i = 0; i < n; i++) {
            inference__cuda_shared_memory_status_response__region_status__init(&st[i]);
            st[i].name = infos[i].name;
            st[i].device_id = (uint64_t)infos[i].device_id;
            st[i].byte_size = infos[i].byte_size;
            inference__cuda_shared_memory_status_response__regions_entry__init(&ents[i]);
            ents[i].key = infos[i].name;
            ents[i].value = &st[i];
            ptrs[i] = &ents[i];
        }
        Inference__CudaSharedMemoryStatusResponse r =
            INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        r.n_regions = (size_t)n;
        r.regions = ptrs;
        slim__grpc_reply(c, &r.base);
    }
    free(st);
    free(ents);
    free(ptrs);
    free(infos);
}

void slim__grpc_shm_cuda_register(slim__grpc_call *c)
{
    Inference__CudaSharedMemoryRegisterRequest *q =
        (void *)slim__grpc_unpack(c, &inference__cuda_shared_memory_register_request__descriptor);
    if (!q)
        return;
    slim_err err = {0};
    slim_status s = slim_server_shm_register_cuda(q->name, q->raw_handle.data, q->raw_handle.len,
                                                  q->device_id, q->byte_size, &err);
    inference__cuda_shared_memory_register_request__free_unpacked(q, NULL);
    Inference__CudaSharedMemoryRegisterResponse r =
        INFERENCE__CUDA_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
    answer_empty(c, s == SLIM_ENOTFOUND ? SLIM_EINVAL : s, &err, &r.base);
}

void slim__grpc_shm_cuda_unregister(slim__grpc_call *c)
{
    unregister(c, SLIM_SHM_CUDA, &inference__cuda_shared_memory_unregister_request__descriptor,
               &inference__cuda_shared_memory_unregister_response__descriptor);
}
