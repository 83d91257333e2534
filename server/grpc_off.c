/*
 * grpc_off.c - the gRPC service in a build without libgrpc-dev: it is not
 * there, and --grpc-port says so (grpc.h). The infer codec (grpc_codec.c)
 * needs only protobuf-c and is built either way.
 */
#include "grpc.h"

bool slim_server_grpc_available(void)
{
    return false;
}

slim_status slim_server_grpc_start(slim_server *srv, const char *host, int port,
                                   slim_server_grpc **out, slim_err *err)
{
    (void)srv;
    (void)host;
    (void)port;
    *out = NULL;
    return slim_errf(err, SLIM_EUNSUPPORTED, "this slimserve was built without gRPC "
                     "(libgrpc-dev was not found); use --grpc-port 0, or rebuild with it "
                     "(scripts/install-deps.sh installs it)");
}

int slim_server_grpc_port(const slim_server_grpc *g)
{
    (void)g;
    return 0;
}

void slim_server_grpc_shutdown(slim_server_grpc *g)
{
    (void)g;
}

void slim_server_grpc_free(slim_server_grpc *g)
{
    (void)g;
}
