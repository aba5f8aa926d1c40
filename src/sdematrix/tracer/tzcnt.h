/* vc-tracer: TZCNT executions with a zero source (see tzcnt.c). */
#ifndef VC_TRACER_TZCNT_H
#define VC_TRACER_TZCNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* whether the presented model has BMI1 (without it TZCNT runs as BSF) */
void tzcnt_model(bool has_bmi1);
/* the instruction at rip of thread tid is about to run: when it is TZCNT
 * (F3 0F BC) with a zero source operand, count it; returns its length when
 * the model runs it as BSF (no BMI1): the caller then runs it that way with
 * tzcnt_as_bsf instead of letting it run (see tzcnt.c); else 0 */
size_t tzcnt_note(pid_t tid, int space, uint64_t rip, const uint8_t *bytes, size_t n);
/* run the zero-source TZCNT of length len at rip of the stopped thread as
 * BSF: the destination kept, ZF set, RIP past it */
bool tzcnt_as_bsf(pid_t tid, uint64_t rip, size_t len);
/* the `tzcnt_zero SPACE ADDR N` lines of the output file */
void tzcnt_write(FILE *f);

#endif
