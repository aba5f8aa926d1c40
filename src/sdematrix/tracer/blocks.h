/*
 * Block stepping (blocks.c): the probe's straight-line blocks, from the
 * profile's `blocks`/`b` records, and the one block in flight.  tracer.c
 * runs a stepping thread through a whole block under a temporary int3 at its
 * last instruction instead of single-stepping each one.
 */
#ifndef VC_TRACER_BLOCKS_H
#define VC_TRACER_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

int blocks_profile_line(const char *line);
void blocks_note_mapping(int space, uint64_t lo, uint64_t hi, uint64_t off, const char *path);
uint64_t blocks_find(int space, uint64_t rip, size_t *before, const uint8_t **lens);
bool blocks_begin(pid_t tid, uint64_t rip, uint64_t end, const uint8_t *lens, bool plant);
pid_t blocks_active_tid(void);
uint64_t blocks_active_end(void);
bool blocks_unplant(void);
bool blocks_each_before(uint64_t stop, void (*fn)(void *ctx, uint64_t addr), void *ctx);
void blocks_forget(void);
void blocks_write_stats(FILE *f);

#endif
