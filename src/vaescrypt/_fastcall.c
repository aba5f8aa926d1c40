/*
 * vaescrypt._fastcall - the C side of the Python binding's common calls.
 *
 * Why this exists
 * ---------------
 * Through cffi, one `vc_gcm_encrypt` call from Python costs about 0.35 us
 * before any AES happens: an argument tuple, ten argument conversions, a GIL
 * release/re-acquire and errno bookkeeping, and then the result has to be
 * copied out of a scratch buffer into a new `bytes`.  A Python-level method in
 * front of even a C entry point costs another ~90 ns (a frame, type checks,
 * attribute loads): as much as the whole AES-GCM of a 64-byte message.
 * `cryptography` spends about 0.57 us per small message in all.
 *
 * So this module provides two things:
 *
 *   KeyRef      owns one native key (made by key_new), frees and wipes it
 *               with the object.  Through cffi (ffi.new + the call + ffi.gc
 *               + reading the address back) a key cost ~1.5 us of binding.
 *
 *   FastMethod  AESGCM.encrypt / .decrypt and AESCFB.encrypt / .decrypt as
 *               C methods.  The common call is answered here, straight into
 *               the result object; every other call goes to the complete
 *               Python method the FastMethod wraps:
 *
 *   g.encrypt(nonce, data, aad)
 *     -> CPython sees Py_TPFLAGS_METHOD_DESCRIPTOR, skips binding and
 *        vectorcalls the FastMethod with args = (g, nonce, data, aad)
 *     -> fast case: positional arguments only, each a C-contiguous bytes,
 *        bytearray or memoryview (GCM data and AAD may be None), g._ref a
 *        KeyRef of the right kind (CFB: byte segments, i.e. not CFB1),
 *        read from its __slots__ slot (owner_ref):
 *
 *          out = PyBytes_FromStringAndSize(NULL, n [+ tag])   fresh, private
 *          vc_gcm_encrypt(key, nonce, aad, data, out[0..n), out[n..])
 *          return out                                         no copy
 *
 *     -> anything else (keywords, bits=, CFB1, another argument type) and
 *        every refusal by the library: the Python method, with
 *        the very same arguments.  It is complete on its own (cffi), words
 *        every error, and so the fast case only ever adds speed.
 *
 * On a GCM tag mismatch the library zeroes what it wrote and the object is
 * freed here, never returned: no plaintext is released; the Python method
 * then checks the message again and raises InvalidTag.
 *
 * Where the library comes from
 * ----------------------------
 * This module links against nothing of ours.  The library lives once in the
 * process, inside the cffi extension vaescrypt._native; the Python layer
 * hands us the addresses of each mode's four functions once, at import
 * (`bind("gcm", ...)`, from `ffi.addressof(lib, "vc_...")`).  So there is one
 * copy of the code, of the dispatcher's CPU probe / VAESCRYPT_CPU_MASK state
 * and of the key layout, whichever binding a call goes through.
 *
 * These are private functions: the addresses are trusted (they come from
 * vaescrypt's own Python code).  Everything else - lengths, argument types -
 * is checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifndef Py_T_OBJECT_EX /* 3.12+ define these in Python.h; 3.11 in structmember.h */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_AUDIT_READ PY_AUDIT_READ
#endif

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vaescrypt.h"

/* ---------------------------------------------------------- GIL policy -- */

/*
 * Releasing and re-taking the GIL (Py_BEGIN/END_ALLOW_THREADS) cost 30-40 ns
 * per call uncontended on the Zen 4 development host (measured from Python:
 * the same call built with threshold 0 vs never); cffi pays it on every call.
 * We pay it only when the C work is long enough (about 0.5 us or more) that
 * another thread gains from running meanwhile and the round trip is at most
 * ~5% of the call.  The thresholds follow each operation's C speed:
 *
 *   GCM (either direction)  ~9 GB/s   4 KiB  ~0.45 us  (measured +5% at 4 KiB, +2% at 16 KiB)
 *   CFB decrypt (parallel)  ~15 GB/s  8 KiB  ~0.55 us  (+8% at 4 KiB, so 8 KiB)
 *   CFB encrypt (serial)    ~1 GB/s   1 KiB  ~1 us     (+2.5% at 1 KiB)
 *
 * The test suite checks that two threads overlap above these sizes.
 */
#define GCM_GIL_RELEASE_MIN ((Py_ssize_t)4096)
#define CFB_DECRYPT_GIL_RELEASE_MIN ((Py_ssize_t)8192)
#define CFB_ENCRYPT_GIL_RELEASE_MIN ((Py_ssize_t)1024)

/* --------------------------------------------- the library's functions -- */

typedef int (*gcm_encrypt_fn)(const vc_gcm_key *, const uint8_t *, size_t, const uint8_t *,
                              size_t, const uint8_t *, uint8_t *, size_t, uint8_t *, size_t);
typedef int (*gcm_decrypt_fn)(const vc_gcm_key *, const uint8_t *, size_t, const uint8_t *,
                              size_t, const uint8_t *, uint8_t *, size_t, const uint8_t *,
                              size_t);
typedef int (*cfb_fn)(const vc_cfb_key *, const uint8_t *, const uint8_t *, uint8_t *, size_t);
typedef int (*gcm_key_new_fn)(vc_gcm_key **, const uint8_t *, size_t, int);
typedef void (*gcm_key_free_fn)(vc_gcm_key *);
typedef int (*cfb_key_new_fn)(vc_cfb_key **, const uint8_t *, size_t, int, int);
typedef void (*cfb_key_free_fn)(vc_cfb_key *);

/* The typedefs must match vaescrypt.h exactly: a function called through a
 * pointer of another type is undefined behaviour.  _Generic does not evaluate
 * its operand, so these checks reference no symbol at link time. */
#define VC_SAME_TYPE(fn, type) _Static_assert(_Generic(&fn, type: 1, default: 0), #type " does not match " #fn)
VC_SAME_TYPE(vc_gcm_encrypt, gcm_encrypt_fn);
VC_SAME_TYPE(vc_gcm_decrypt, gcm_decrypt_fn);
VC_SAME_TYPE(vc_cfb_encrypt, cfb_fn);
VC_SAME_TYPE(vc_cfb_decrypt, cfb_fn);
VC_SAME_TYPE(vc_gcm_key_new, gcm_key_new_fn);
VC_SAME_TYPE(vc_gcm_key_free, gcm_key_free_fn);
VC_SAME_TYPE(vc_cfb_key_new, cfb_key_new_fn);
VC_SAME_TYPE(vc_cfb_key_free, cfb_key_free_fn);

/* Set once by bind() (at import, under the import lock), read-only after. */
static struct {
    gcm_encrypt_fn encrypt;
    gcm_decrypt_fn decrypt;
    gcm_key_new_fn key_new;
    gcm_key_free_fn key_free;
} gcm;
static struct {
    cfb_fn encrypt;
    cfb_fn decrypt;
    cfb_key_new_fn key_new;
    cfb_key_free_fn key_free;
} cfb;

/*
 * bind(mode, encrypt, decrypt, key_new, key_free): a mode's four function
 * addresses, as Python ints.  A mode may be bound once; binding it again to
 * the same addresses is a no-op (a module reloaded), to others an error (two
 * libraries in one process would mix key layouts).  Converting between
 * integers and function pointers is implementation-defined in ISO C; POSIX
 * (dlsym) requires it to round-trip, and cffi handed us exactly such an
 * address.
 */
static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "bind takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    const char *mode = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
    if (mode == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "bind: mode must be a str");
        return NULL;
    }
    const int is_gcm = strcmp(mode, "gcm") == 0;
    if (!is_gcm && strcmp(mode, "cfb") != 0) {
        PyErr_Format(PyExc_ValueError, "bind: unknown mode %s", mode);
        return NULL;
    }
    uintptr_t got[4];
    for (int i = 0; i < 4; i++) {
        void *p = PyLong_AsVoidPtr(args[1 + i]);
        if (p == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bind: NULL function address");
            return NULL;
        }
        got[i] = (uintptr_t)p;
    }
    const uintptr_t had[4] = {
        is_gcm ? (uintptr_t)gcm.encrypt : (uintptr_t)cfb.encrypt,
        is_gcm ? (uintptr_t)gcm.decrypt : (uintptr_t)cfb.decrypt,
        is_gcm ? (uintptr_t)gcm.key_new : (uintptr_t)cfb.key_new,
        is_gcm ? (uintptr_t)gcm.key_free : (uintptr_t)cfb.key_free,
    };
    for (int i = 0; i < 4; i++) {
        if (had[i] && had[i] != got[i]) {
            PyErr_Format(PyExc_RuntimeError, "bind: %s already bound to other addresses", mode);
            return NULL;
        }
    }
    if (is_gcm) {
        gcm.encrypt = (gcm_encrypt_fn)got[0];
        gcm.decrypt = (gcm_decrypt_fn)got[1];
        gcm.key_new = (gcm_key_new_fn)got[2];
        gcm.key_free = (gcm_key_free_fn)got[3];
    } else {
        cfb.encrypt = (cfb_fn)got[0];
        cfb.decrypt = (cfb_fn)got[1];
        cfb.key_new = (cfb_key_new_fn)got[2];
        cfb.key_free = (cfb_key_free_fn)got[3];
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ arguments -- */

/* A read-only byte string argument: exact `bytes` are read in place (no
 * buffer export, the common case); anything else goes through the buffer
 * protocol (C-contiguous, e.g. bytearray / memoryview), which also pins a
 * bytearray's size while the GIL is released. */
typedef struct {
    const uint8_t *p;
    Py_ssize_t len;
    Py_buffer view; /* view.obj != NULL when a buffer was exported */
} ro_arg;

static const uint8_t empty_input[1];

static int ro_get(PyObject *o, ro_arg *a, int allow_none)
{
    a->view.obj = NULL;
    if (PyBytes_CheckExact(o)) {
        a->p = (const uint8_t *)PyBytes_AS_STRING(o);
        a->len = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (allow_none && o == Py_None) {
        a->p = empty_input;
        a->len = 0;
        return 0;
    }
    if (PyObject_GetBuffer(o, &a->view, PyBUF_SIMPLE) != 0)
        return -1;
    a->p = a->view.buf ? (const uint8_t *)a->view.buf : empty_input;
    a->len = a->view.len;
    return 0;
}

static void ro_release(ro_arg *a)
{
    if (a->view.obj)
        PyBuffer_Release(&a->view);
}

/* Release the GIL only for inputs big enough to repay it (~30-40 ns a
 * release/reacquire pair, measured); NULL means "kept". */
static PyThreadState *maybe_release(Py_ssize_t n, Py_ssize_t min)
{
    return n >= min ? PyEval_SaveThread() : NULL;
}

static void maybe_restore(PyThreadState *ts)
{
    if (ts != NULL)
        PyEval_RestoreThread(ts);
}

/* ----------------------------------------------------------------- keys -- */

enum { KEY_GCM = 0, KEY_CFB = 1 };

/*
 * KeyRef: owns one native key.  Immutable, not subclassable, no cycles (it
 * references no Python object), so no GC tracking: creating and dropping one
 * is a plain allocation.  Freed with the library's own vc_*_key_free, which
 * wipes the key material first.
 */
typedef struct {
    PyObject_HEAD
    void *key;
    int kind;  /* KEY_GCM / KEY_CFB */
    int param; /* GCM: tag length (1..16); CFB: segment size in bits */
} KeyRef;

static void keyref_dealloc(PyObject *o)
{
    KeyRef *r = (KeyRef *)o;
    if (r->kind == KEY_GCM)
        gcm.key_free((vc_gcm_key *)r->key);
    else
        cfb.key_free((vc_cfb_key *)r->key);
    PyObject_Free(o);
}

static PyObject *keyref_addr(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(((KeyRef *)o)->key);
}

/* The parameter the key was made with, so that a caller holding the KeyRef
 * (a stream, a Python method) uses the key's own tag length / segment size,
 * never a value read separately from an owner that may have been re-keyed. */
static PyObject *keyref_param(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((KeyRef *)o)->param);
}

/* The key's kind (KEY_GCM / KEY_CFB): the Python layer checks it wherever it
 * turns addr into a typed pointer, so a CFB key never reaches a GCM function
 * (the library checks its own tag as well: VC_ERR_OBJECT). */
static PyObject *keyref_kind(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((KeyRef *)o)->kind);
}

static PyGetSetDef keyref_getset[] = {
    {"addr", keyref_addr, NULL, "address of the native key (an int)", NULL},
    {"kind", keyref_kind, NULL, "KEY_GCM or KEY_CFB", NULL},
    {"param", keyref_param, NULL, "GCM: the tag length; CFB: the segment size in bits", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject KeyRef_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vaescrypt._fastcall.KeyRef",
    .tp_basicsize = sizeof(KeyRef),
    .tp_dealloc = keyref_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Owner of one native vaescrypt key (private); freed and wiped with the object.",
    .tp_getset = keyref_getset,
};

/* An int argument that must fit a C int (kinds, impl codes, parameters). */
static int int_arg(PyObject *o, int *v)
{
    const long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (x < INT_MIN || x > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "argument out of range for a C int");
        return -1;
    }
    *v = (int)x;
    return 0;
}

/*
 * key_new(kind, key, impl, param) -> KeyRef | status
 *   KEY_GCM: param = tag length, 1..16 (what the FastMethods use)
 *   KEY_CFB: param = segment size in bits (vc_cfb_key_new checks it)
 * A refusal comes back as the library's negative vc_status (an int).
 */
static PyObject *key_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "key_new takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    int kind, impl, param;
    ro_arg key;
    if (int_arg(args[0], &kind) || int_arg(args[2], &impl) || int_arg(args[3], &param))
        return NULL;
    if (kind != KEY_GCM && kind != KEY_CFB) {
        PyErr_Format(PyExc_ValueError, "key_new: unknown key kind %d", kind);
        return NULL;
    }
    if (kind == KEY_GCM ? gcm.key_new == NULL : cfb.key_new == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastcall.key_new called before bind");
        return NULL;
    }
    if (ro_get(args[1], &key, 0))
        return NULL;
    void *k = NULL;
    int st;
    if (kind == KEY_GCM) {
        st = param < 1 || param > 16
                 ? VC_ERR_TAG_LENGTH
                 : gcm.key_new((vc_gcm_key **)&k, key.p, (size_t)key.len, impl);
    } else {
        st = cfb.key_new((vc_cfb_key **)&k, key.p, (size_t)key.len, param, impl);
    }
    ro_release(&key);
    if (st != VC_OK)
        return PyLong_FromLong(st);
    KeyRef *r = PyObject_New(KeyRef, &KeyRef_Type);
    if (r == NULL) {
        if (kind == KEY_GCM)
            gcm.key_free(k);
        else
            cfb.key_free(k);
        return NULL;
    }
    r->key = k;
    r->kind = kind;
    r->param = param;
    return (PyObject *)r;
}

/* ------------------------------------------------------- the one-shots -- */

/*
 * Each returns the new `bytes`; or NULL with MemoryError set; or NULL with
 * no exception set when the library (or a size check here) refused the call,
 * for the Python method to word.  Sizes are checked before allocating: an
 * over-long message must not cost a huge allocation to be refused.
 *
 * GCM encrypt, one allocation written once by the library:
 *     out: [ ciphertext: n bytes ][ tag: tl bytes ]
 * GCM decrypt:
 *     data: [ ciphertext: n bytes ][ tag: tl bytes ]   n = len(data) - tl
 */
static PyObject *refused(PyObject *out)
{
    Py_XDECREF(out); /* after VC_ERR_AUTH the library has zeroed it already */
    return NULL;
}

static PyObject *gcm_seal(const KeyRef *k, const ro_arg *nonce, const ro_arg *data,
                          const ro_arg *aad)
{
    const Py_ssize_t n = data->len, tl = k->param;
    if ((uint64_t)n > VC_GCM_MAX_DATA)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + tl); /* tl >= 1: never b"" */
    if (out == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    PyThreadState *ts = maybe_release(n, GCM_GIL_RELEASE_MIN);
    const int st = gcm.encrypt(k->key, nonce->p, (size_t)nonce->len, aad->p, (size_t)aad->len,
                               data->p, o, (size_t)n, o + n, (size_t)tl);
    maybe_restore(ts);
    return st == VC_OK ? out : refused(out);
}

static PyObject *gcm_open(const KeyRef *k, const ro_arg *nonce, const ro_arg *data,
                          const ro_arg *aad)
{
    const Py_ssize_t tl = k->param, n = data->len - tl;
    if (n < 0 || (uint64_t)n > VC_GCM_MAX_DATA)
        return NULL; /* shorter than the tag: the Python method says so */
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    uint8_t sink[1]; /* out pointer for n == 0 (never write into b"") */
    uint8_t *o = n ? (uint8_t *)PyBytes_AS_STRING(out) : sink;
    PyThreadState *ts = maybe_release(n, GCM_GIL_RELEASE_MIN);
    const int st = gcm.decrypt(k->key, nonce->p, (size_t)nonce->len, aad->p, (size_t)aad->len,
                               data->p, o, (size_t)n, data->p + n, (size_t)tl);
    maybe_restore(ts);
    return st == VC_OK ? out : refused(out);
}

/* CFB128 / CFB8 only: the length passed to the library is a byte count
 * (CFB1's would be bits).  vc_cfb_* takes the IV without a length, so its
 * length is checked here: the library reads 16 bytes. */
static PyObject *cfb_crypt(const KeyRef *k, const ro_arg *iv, const ro_arg *data, int enc)
{
    if (iv->len != 16)
        return NULL;
    const Py_ssize_t n = data->len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    uint8_t sink[1];
    uint8_t *o = n ? (uint8_t *)PyBytes_AS_STRING(out) : sink;
    PyThreadState *ts =
        maybe_release(n, enc ? CFB_ENCRYPT_GIL_RELEASE_MIN : CFB_DECRYPT_GIL_RELEASE_MIN);
    const int st = (enc ? cfb.encrypt : cfb.decrypt)(k->key, iv->p, data->p, o, (size_t)n);
    maybe_restore(ts);
    return st == VC_OK ? out : refused(out);
}

/* --------------------------------------------------------- FastMethod -- */

typedef enum { FM_GCM_ENCRYPT, FM_GCM_DECRYPT, FM_CFB_ENCRYPT, FM_CFB_DECRYPT } fm_op;

static const struct {
    const char *name;
    int key_kind;
    Py_ssize_t nargs; /* positional arguments, self included */
} fm_ops[] = {
    [FM_GCM_ENCRYPT] = {"gcm_encrypt", KEY_GCM, 4}, /* self, nonce, data, aad */
    [FM_GCM_DECRYPT] = {"gcm_decrypt", KEY_GCM, 4},
    [FM_CFB_ENCRYPT] = {"cfb_encrypt", KEY_CFB, 3}, /* self, iv, data */
    [FM_CFB_DECRYPT] = {"cfb_decrypt", KEY_CFB, 3},
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    fm_op op;
    PyObject *slow; /* the complete Python method: slow(self, *args, **kwargs) */
    long long hits; /* calls answered by the fast case (tests read it) */
    /* Where the last owner type keeps _ref (see owner_ref): valid while
     * that type's version tag is. */
    PyTypeObject *ref_type; /* borrowed: only compared, never dereferenced stale */
    unsigned int ref_version;
    Py_ssize_t ref_offset;
} FastMethod;

static PyObject *str_ref; /* interned "_ref" */

/* What the Python methods accept as data (vaescrypt._buffers.as_view):
 * bytes, bytearray, memoryview -- not every buffer exporter, so that a call
 * means the same whichever way it is made. */
static int byteslike(PyObject *o)
{
    return PyBytes_Check(o) || PyByteArray_Check(o) || PyMemoryView_Check(o);
}

/*
 * owner._ref as a new reference, or NULL with no exception set (no such
 * attribute: the Python method says so).
 *
 * AESGCM / AESCFB declare _ref in __slots__, so it is a member descriptor on
 * the class and its value sits at a fixed offset in the instance.  The
 * generic PyObject_GetAttr cost ~12 ns here (type lookup, descriptor call,
 * checks), a quarter of the per-call overhead; the slot read below ~1 ns.
 *
 * The slot is read directly only where that is exactly what getattr() does:
 * the type's attribute lookup is the generic one (no __getattribute__ /
 * __getattr__ override), "_ref" resolves on the MRO to a plain object member
 * (a data descriptor, so an instance __dict__ entry cannot shadow it) with
 * no audit hook, and the instance is of the class defining the slot (a
 * descriptor copied onto an unrelated class must not read a foreign offset).
 * Anything else - a subclass's property, a class without the slot - goes
 * through PyObject_GetAttr as before.
 *
 * The finding is cached per FastMethod under the type's version tag, as
 * CPython's own attribute specialisations do: any change to the type or to
 * a class on its MRO (assigning _ref, __getattribute__, ...) invalidates the
 * tag, and tags are never reused, so a type freed and another allocated at
 * the same address cannot match.  The cache is read and written with the
 * GIL held.
 */
static PyObject *owner_ref(FastMethod *m, PyObject *owner)
{
    PyTypeObject *tp = Py_TYPE(owner);
    PyObject *v;
    if (tp == m->ref_type && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
        tp->tp_version_tag == m->ref_version) {
        v = *(PyObject **)((char *)owner + m->ref_offset);
        Py_XINCREF(v); /* NULL: the slot is unset */
        return v;
    }
    if (tp->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(tp, str_ref); /* borrowed; may assign the tag */
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            const PyMemberDef *md = ((PyMemberDescrObject *)d)->d_member;
            if (md->type == Py_T_OBJECT_EX && !(md->flags & Py_AUDIT_READ) &&
                PyObject_TypeCheck(owner, PyDescr_TYPE(d))) {
                if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {
                    m->ref_type = tp;
                    m->ref_version = tp->tp_version_tag;
                    m->ref_offset = md->offset;
                }
                v = *(PyObject **)((char *)owner + md->offset);
                Py_XINCREF(v);
                return v;
            }
        }
    }
    v = PyObject_GetAttr(owner, str_ref);
    if (v == NULL)
        PyErr_Clear(); /* not one of ours: let the Python method say so */
    return v;
}

/* The fast case; NULL with no exception set means "not for me". */
static PyObject *fm_try(FastMethod *m, PyObject *const *args)
{
    const int gcm_op = fm_ops[m->op].key_kind == KEY_GCM;
    for (Py_ssize_t i = 1; i < fm_ops[m->op].nargs; i++)
        if (!byteslike(args[i]) && !(gcm_op && i >= 2 && args[i] == Py_None))
            return NULL;
    /* A new reference, held until the call has returned: re-running the
     * owner's __init__ (or replacing its _ref) from another thread while the
     * GIL is released below drops only the owner's reference, and the key
     * this call uses is freed after it, never under it. */
    PyObject *ref = owner_ref(m, args[0]);
    if (ref == NULL)
        return NULL;
    const KeyRef *k = (const KeyRef *)ref;
    PyObject *r = NULL;
    if (Py_IS_TYPE(ref, &KeyRef_Type) && k->kind == fm_ops[m->op].key_kind &&
        (gcm_op || k->param != 1)) {
        ro_arg a0, a1, a2;
        a2.view.obj = NULL;
        /* Not C-contiguous: the Python method words it. */
        if (ro_get(args[1], &a0, 0) == 0) {
            if (ro_get(args[2], &a1, gcm_op) == 0) {
                if (!gcm_op || ro_get(args[3], &a2, 1) == 0) {
                    switch (m->op) {
                    case FM_GCM_ENCRYPT: r = gcm_seal(k, &a0, &a1, &a2); break;
                    case FM_GCM_DECRYPT: r = gcm_open(k, &a0, &a1, &a2); break;
                    case FM_CFB_ENCRYPT: r = cfb_crypt(k, &a0, &a1, 1); break;
                    case FM_CFB_DECRYPT: r = cfb_crypt(k, &a0, &a1, 0); break;
                    }
                    ro_release(&a2);
                }
                ro_release(&a1);
            }
            ro_release(&a0);
        }
        if (r == NULL && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
            PyErr_Clear(); /* a buffer-protocol refusal, not ours to report */
    }
    Py_DECREF(ref);
    if (r != NULL)
        m->hits++;
    return r;
}

static PyObject *fm_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    FastMethod *m = (FastMethod *)callable;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == fm_ops[m->op].nargs) {
        PyObject *r = fm_try(m, args);
        if (r != NULL || PyErr_Occurred())
            return r; /* the result, or MemoryError */
    }
    return PyObject_Vectorcall(m->slow, args, nargsf, kwnames);
}

static PyObject *fm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    const char *kind;
    PyObject *slow;
    static char *kwlist[] = {"kind", "slow", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO:FastMethod", kwlist, &kind, &slow))
        return NULL;
    int op = -1;
    for (int i = 0; i < (int)(sizeof fm_ops / sizeof fm_ops[0]); i++)
        if (strcmp(kind, fm_ops[i].name) == 0)
            op = i;
    const int bound = op < 0 ? 0 : fm_ops[op].key_kind == KEY_GCM ? gcm.encrypt != NULL
                                                                   : cfb.encrypt != NULL;
    if (!bound) {
        PyErr_Format(PyExc_ValueError, "FastMethod: unknown or unbound kind %s", kind);
        return NULL;
    }
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FastMethod: slow must be callable");
        return NULL;
    }
    FastMethod *m = (FastMethod *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->vectorcall = fm_vectorcall;
    m->op = (fm_op)op;
    m->hits = 0;
    m->ref_type = NULL; /* tp_alloc zeroed the rest too; said for the reader */
    Py_INCREF(slow);
    m->slow = slow;
    return (PyObject *)m;
}

static int fm_traverse(PyObject *o, visitproc visit, void *arg)
{
    Py_VISIT(((FastMethod *)o)->slow);
    return 0;
}

static int fm_clear(PyObject *o)
{
    Py_CLEAR(((FastMethod *)o)->slow);
    return 0;
}

static void fm_dealloc(PyObject *o)
{
    PyObject_GC_UnTrack(o);
    fm_clear(o);
    Py_TYPE(o)->tp_free(o);
}

/* Attribute access without a call (g.encrypt): a bound method, as for a
 * Python function; on the class (AESGCM.encrypt): the descriptor itself. */
static PyObject *fm_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* help() and inspect see the wrapped Python method. */
static PyObject *fm_slow_attr(PyObject *o, void *name)
{
    PyObject *slow = ((FastMethod *)o)->slow;
    if (name == NULL) {
        Py_INCREF(slow);
        return slow;
    }
    return PyObject_GetAttrString(slow, (const char *)name);
}

static PyObject *fm_hits(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(((FastMethod *)o)->hits);
}

static PyObject *fm_repr(PyObject *o)
{
    PyObject *q = PyObject_GetAttrString(((FastMethod *)o)->slow, "__qualname__");
    if (q == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<fast method %S>", q);
    Py_DECREF(q);
    return r;
}

static PyGetSetDef fm_getset[] = {
    {"__wrapped__", fm_slow_attr, NULL, "the Python method this one speeds up", NULL},
    {"__doc__", fm_slow_attr, NULL, NULL, "__doc__"},
    {"__name__", fm_slow_attr, NULL, NULL, "__name__"},
    {"__qualname__", fm_slow_attr, NULL, NULL, "__qualname__"},
    {"hits", fm_hits, NULL, "calls answered by the C fast case", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastMethod_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vaescrypt._fastcall.FastMethod",
    .tp_basicsize = sizeof(FastMethod),
    .tp_dealloc = fm_dealloc,
    .tp_repr = fm_repr,
    .tp_vectorcall_offset = offsetof(FastMethod, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = fm_traverse,
    .tp_clear = fm_clear,
    .tp_getset = fm_getset,
    .tp_descr_get = fm_descr_get,
    .tp_new = fm_new,
};

/* ---------------------------------------------------------------- module -- */

static PyMethodDef fastcall_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(mode, encrypt, decrypt, key_new, key_free): the addresses of vc_<mode>_*."},
    {"key_new", (PyCFunction)(void (*)(void))key_new, METH_FASTCALL,
     "key_new(kind, key, impl, param) -> KeyRef owning a new key, or a vc_status int."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "vaescrypt._fastcall",
    .m_doc = "Key references and C methods for the one-shot calls (private).",
    .m_size = -1, /* process-global state, like the library it calls */
    .m_methods = fastcall_methods,
};

static int add_type(PyObject *m, const char *name, PyTypeObject *t)
{
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__fastcall(void)
{
    if (PyType_Ready(&KeyRef_Type) < 0 || PyType_Ready(&FastMethod_Type) < 0)
        return NULL;
    if (str_ref == NULL && (str_ref = PyUnicode_InternFromString("_ref")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&fastcall_module);
    if (m == NULL)
        return NULL;
    /* The key kinds, and the thresholds (for tests and benchmarks). */
    if (add_type(m, "KeyRef", &KeyRef_Type) || add_type(m, "FastMethod", &FastMethod_Type) ||
        PyModule_AddIntConstant(m, "KEY_GCM", KEY_GCM) ||
        PyModule_AddIntConstant(m, "KEY_CFB", KEY_CFB) ||
        PyModule_AddIntConstant(m, "GCM_GIL_RELEASE_MIN", (long)GCM_GIL_RELEASE_MIN) ||
        PyModule_AddIntConstant(m, "CFB_ENCRYPT_GIL_RELEASE_MIN",
                                (long)CFB_ENCRYPT_GIL_RELEASE_MIN) ||
        PyModule_AddIntConstant(m, "CFB_DECRYPT_GIL_RELEASE_MIN",
                                (long)CFB_DECRYPT_GIL_RELEASE_MIN)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
