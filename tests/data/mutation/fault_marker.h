/*
 * fault_marker.h - TEST ONLY: makes a mutation-test ("fault") build
 * recognisable.
 *
 * Each fault_*.c here is linked into a probe by tests/doubles/fault_builds.py
 * and nowhere else; the library's own sources know nothing of faults.
 * Whether a compiled binary carries a fault cannot be read from its code
 * reliably (a fault is a changed table entry or one extra instruction), so a
 * fault source also exports the object `vc_fault_build`, whose bytes spell
 * out the fault.  tests/test_production_build.py checks that the shipped
 * extension and vc-probe have no such symbol and no "VC_FAULT" bytes, and
 * that every fault source does carry its marker.
 */
#ifndef VC_FAULT_MARKER_H
#define VC_FAULT_MARKER_H

/* Not static and used-attributed: it must survive into the symbol table. */
#define VC_FAULT_MARKER(name)                                                  \
    extern const char vc_fault_build[];                                        \
    __attribute__((used)) const char vc_fault_build[] = "VC_FAULT_BUILD: " name

#endif
