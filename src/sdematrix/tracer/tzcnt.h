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
/* the instruction at rip of thread tid is about to run: on a model without
 * BMI1, when it is TZCNT (F3 0F BC) with a zero source operand, count it,
 * run it as that model does, BSF of zero (destination kept, ZF set, RIP
 * past it: see tzcnt.c) and return true (the caller does not run it);
 * false, having read nothing, on a model with BMI1 */
bool tzcnt_note(pid_t tid, int space, uint64_t rip, const uint8_t *bytes, size_t n);
/* the `tzcnt_zero SPACE ADDR N` lines of the output file */
void tzcnt_write(FILE *f);

#endif
