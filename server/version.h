/*
 * version.h - the server's name and version, as metadata and logs show them.
 */
#ifndef SLIM_SERVER_VERSION_H
#define SLIM_SERVER_VERSION_H



#define SLIM_SERVER_NAME "slimserve"
#define SLIM_SERVER_VERSION "0.1.0"

#endif
