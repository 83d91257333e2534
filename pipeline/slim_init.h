/*
 * slim_init.h - the one call every program makes before anything else.
 *
 *     int main(int argc, char **argv)
 *     {
 *         slim_init();
 *         ...
 *     }
 *
 * It registers the CPU's operators (the contract graphs are finalized
 * against) and the device backends (pipeline/devices.c). runtime/ cannot
 * do it itself: it sits below the kernels and knows no backend by name.
 */
#ifndef SLIM_INIT_H
#define SLIM_INIT_H

/* Idempotent and thread-safe (pthread_once); cheap after the first call.
 * A failure (out of memory in a fixed-size registry: a programming error)
 * is reported on stderr, and graphs then fail to load with a message
 * that names slim_init. */
void slim_init(void);

#endif
