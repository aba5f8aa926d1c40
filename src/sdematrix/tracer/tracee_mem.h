/* vc-tracer: reading and writing a stopped tracee's memory. */
#ifndef VC_TRACER_TRACEE_MEM_H
#define VC_TRACER_TRACEE_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* one byte at addr: 0, or -1 when unreadable */
int peek_byte(pid_t pid, uint64_t addr, uint8_t *out);
/* write one byte at addr (code pages too): 0, or -1 */
int poke_byte(pid_t pid, uint64_t addr, uint8_t v);
/* Read up to n bytes; a read crossing into an unmapped page is cut short. */
size_t read_mem(pid_t pid, uint64_t addr, uint8_t *buf, size_t n);

#endif
