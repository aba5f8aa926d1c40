/*
 * qemu_plugin_api.h - the part of QEMU's TCG plugin API (version 1, as in
 * QEMU 7.2) that the sdematrix mix plugin uses.
 *
 * Debian does not package QEMU's own plugin header, so the few types and
 * functions needed are declared here from the documented API ("QEMU TCG
 * Plugins", docs/devel/tcg-plugins).  The functions are exported by the
 * qemu-x86_64 binary itself (`nm -D qemu-x86_64 | grep qemu_plugin`) and are
 * resolved when QEMU dlopen()s the plugin.  Only API version 1 layouts are
 * described; the plugin checks the version QEMU reports before using them.
 */
#ifndef SDEMATRIX_QEMU_PLUGIN_API_H
#define SDEMATRIX_QEMU_PLUGIN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SDM_QEMU_PLUGIN_API_VERSION 1

/* Symbols QEMU looks up in the plugin must stay visible. */
#define SDM_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Opaque handle of one loaded plugin. */
typedef uint64_t qemu_plugin_id_t;

/* What QEMU tells the plugin at install time. */
typedef struct qemu_info_t {
    const char *target_name; /* "x86_64"                                */
    struct {
        int min; /* oldest API version this QEMU accepts               */
        int cur; /* API version this QEMU implements                   */
    } version;
    bool system_emulation; /* false under qemu-user                     */
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;

/* Opaque translation-time views of a translation block and an instruction. */
struct qemu_plugin_tb;
struct qemu_plugin_insn;

/* Which guest registers a callback may touch (we touch none). */
enum qemu_plugin_cb_flags {
    QEMU_PLUGIN_CB_NO_REGS,
    QEMU_PLUGIN_CB_R_REGS,
    QEMU_PLUGIN_CB_RW_REGS,
};

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

/* Registration. */
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb,
                                    void *userdata);

/* Translation-time queries (valid only inside the tb_trans callback, except
 * that the symbol string lives as long as QEMU's symbol table). */
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void *qemu_plugin_insn_haddr(const struct qemu_plugin_insn *insn);
const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);

/* linux-user only: the main image's code range and entry point (guest
 * addresses), from which the host recovers a PIE's load bias. */
uint64_t qemu_plugin_start_code(void);
uint64_t qemu_plugin_end_code(void);
uint64_t qemu_plugin_entry_code(void);

/* Print through QEMU's log (stderr unless -D). */
void qemu_plugin_outs(const char *string);

#endif
