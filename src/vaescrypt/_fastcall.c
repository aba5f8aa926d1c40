/*
 * vaescrypt._fastcall - CPython entry points for the one-shot calls.
 *
 * Why this exists
 * ---------------
 * Through cffi, one `vc_gcm_encrypt` call from Python costs about 0.35 us
 * before any AES happens: an argument tuple, ten argument conversions, a GIL
 * release/re-acquire and errno bookkeeping, and then the result has to be
 * copied out of a scratch buffer into a new `bytes`.  `cryptography` spends
 * about 0.7 us per small message in all, so a cffi binding cannot beat it at
 * small sizes however fast the C is.  The functions here are METH_FASTCALL
 * (arguments arrive as a C array, no tuple), read `bytes` arguments in place,
 * and let the library write straight into the result object:
 *
 *     Python                 _fastcall                      library
 *     ------                 ---------                      -------
 *     gcm_seal(key, nonce,   out = PyBytes_FromStringAndSize(NULL, n + tl)
 *              data, aad,      |  (fresh, private: nobody else holds it)
 *              tl)             v
 *                            vc_gcm_encrypt(key, nonce, aad, data,
 *                                           out[0..n), out[n..n+tl))  ---> AES/GHASH
 *     <-- out (ct || tag)      |
 *                              +-- on error: drop out, return the status int
 *
 * No copy, no scratch pool, no per-call allocation besides the result.
 *
 * Where the library comes from
 * ----------------------------
 * This module links against nothing of ours.  The library lives once in the
 * process, inside the cffi extension vaescrypt._native; the Python layer
 * hands us the addresses of its four one-shot functions once, at import
 * (`bind_gcm` / `bind_cfb`, from `ffi.addressof(lib, "vc_...")`).  So there is
 * one copy of the code, of the dispatcher's CPU probe / VAESCRYPT_CPU_MASK
 * state and of the key layout, whichever binding a call goes through; a key
 * made by the cffi side is used by the very code that made it.
 *
 * Keys are made here too (gcm_key_new / cfb_key_new): the result is a KeyRef,
 * a tiny object that owns one native key and frees (wipes) it when the last
 * reference goes; its `addr` is the key's address.  The Python AESGCM /
 * AESCFB object holds the KeyRef, and so the key, for its whole life; calls
 * pass the integer address (the caller's frame keeps the object alive for
 * the call).  Through cffi (ffi.new + the call + ffi.gc + reading the
 * address back) a key cost ~1.5 us of binding overhead on top of the C work,
 * twice what `cryptography` spends on a whole AESGCM(key).
 *
 * Return convention
 * -----------------
 * Every entry point returns the result `bytes`, or a negative vc_status as a
 * Python int when the library (or a size check here) refused the call; the
 * Python layer then raises exactly what the cffi path raises.  A Python
 * exception (TypeError for a bad argument type, MemoryError) propagates as
 * usual.  On a GCM tag mismatch the library zeroes what it wrote and the
 * result object is freed here, never returned: no plaintext is released.
 *
 * These are private functions: the addresses and key pointers are trusted
 * (they come from vaescrypt's own Python code).  Everything else - lengths,
 * argument types - is checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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
_Static_assert(_Generic(&vc_gcm_encrypt, gcm_encrypt_fn: 1, default: 0),
               "gcm_encrypt_fn does not match vc_gcm_encrypt");
_Static_assert(_Generic(&vc_gcm_decrypt, gcm_decrypt_fn: 1, default: 0),
               "gcm_decrypt_fn does not match vc_gcm_decrypt");
_Static_assert(_Generic(&vc_cfb_encrypt, cfb_fn: 1, default: 0),
               "cfb_fn does not match vc_cfb_encrypt");
_Static_assert(_Generic(&vc_cfb_decrypt, cfb_fn: 1, default: 0),
               "cfb_fn does not match vc_cfb_decrypt");
_Static_assert(_Generic(&vc_gcm_key_new, gcm_key_new_fn: 1, default: 0),
               "gcm_key_new_fn does not match vc_gcm_key_new");
_Static_assert(_Generic(&vc_gcm_key_free, gcm_key_free_fn: 1, default: 0),
               "gcm_key_free_fn does not match vc_gcm_key_free");
_Static_assert(_Generic(&vc_cfb_key_new, cfb_key_new_fn: 1, default: 0),
               "cfb_key_new_fn does not match vc_cfb_key_new");
_Static_assert(_Generic(&vc_cfb_key_free, cfb_key_free_fn: 1, default: 0),
               "cfb_key_free_fn does not match vc_cfb_key_free");

/* Set once by bind_gcm / bind_cfb (at import, under the import lock),
 * read-only afterwards. */
static gcm_encrypt_fn p_gcm_encrypt;
static gcm_decrypt_fn p_gcm_decrypt;
static cfb_fn p_cfb_encrypt;
static cfb_fn p_cfb_decrypt;
static gcm_key_new_fn p_gcm_key_new;
static gcm_key_free_fn p_gcm_key_free;
static cfb_key_new_fn p_cfb_key_new;
static cfb_key_free_fn p_cfb_key_free;

/*
 * Two function addresses from Python ints, checked against what is bound.
 * A slot may be set once; binding it again to the same address is a no-op (a
 * module reloaded), to another address an error (two libraries in one
 * process would mix key layouts).  Converting between integers and function
 * pointers is implementation-defined in ISO C; POSIX (dlsym) requires it to
 * round-trip, and cffi handed us exactly such an address.
 */
static int bind_args(PyObject *const *args, Py_ssize_t nargs, const char *name,
                     uintptr_t bound_enc, uintptr_t bound_dec, uintptr_t *enc, uintptr_t *dec)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes 2 arguments (%zd given)", name, nargs);
        return -1;
    }
    void *e = PyLong_AsVoidPtr(args[0]);
    if (e == NULL && PyErr_Occurred())
        return -1;
    void *d = PyLong_AsVoidPtr(args[1]);
    if (d == NULL && PyErr_Occurred())
        return -1;
    if (e == NULL || d == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: NULL function address", name);
        return -1;
    }
    *enc = (uintptr_t)e;
    *dec = (uintptr_t)d;
    if ((bound_enc && bound_enc != *enc) || (bound_dec && bound_dec != *dec)) {
        PyErr_Format(PyExc_RuntimeError, "%s: already bound to other addresses", name);
        return -1;
    }
    return 0;
}

static PyObject *bind_gcm(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uintptr_t e, d;
    if (bind_args(args, nargs, "bind_gcm", (uintptr_t)p_gcm_encrypt, (uintptr_t)p_gcm_decrypt,
                  &e, &d))
        return NULL;
    p_gcm_encrypt = (gcm_encrypt_fn)e;
    p_gcm_decrypt = (gcm_decrypt_fn)d;
    Py_RETURN_NONE;
}

static PyObject *bind_cfb(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uintptr_t e, d;
    if (bind_args(args, nargs, "bind_cfb", (uintptr_t)p_cfb_encrypt, (uintptr_t)p_cfb_decrypt,
                  &e, &d))
        return NULL;
    p_cfb_encrypt = (cfb_fn)e;
    p_cfb_decrypt = (cfb_fn)d;
    Py_RETURN_NONE;
}

static PyObject *bind_gcm_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uintptr_t n, f;
    if (bind_args(args, nargs, "bind_gcm_key", (uintptr_t)p_gcm_key_new,
                  (uintptr_t)p_gcm_key_free, &n, &f))
        return NULL;
    p_gcm_key_new = (gcm_key_new_fn)n;
    p_gcm_key_free = (gcm_key_free_fn)f;
    Py_RETURN_NONE;
}

static PyObject *bind_cfb_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    uintptr_t n, f;
    if (bind_args(args, nargs, "bind_cfb_key", (uintptr_t)p_cfb_key_new,
                  (uintptr_t)p_cfb_key_free, &n, &f))
        return NULL;
    p_cfb_key_new = (cfb_key_new_fn)n;
    p_cfb_key_free = (cfb_key_free_fn)f;
    Py_RETURN_NONE;
}

/* Calling an entry point before its bind is a bug in vaescrypt, not bad input. */
static int check_bound(int bound, const char *name)
{
    if (bound)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "_fastcall.%s called before bind", name);
    return -1;
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

/* Status as a Python int (the "refused" result). */
static PyObject *status_result(int st) { return PyLong_FromLong(st); }

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

/* How every entry point ends: the new bytes object on success; NULL when the
 * allocation failed with an exception set; else the status as an int, after
 * freeing `out` (on VC_ERR_AUTH the library has already zeroed it, so no
 * plaintext is released). */
static PyObject *finish(PyObject *out, int st)
{
    if (st == VC_OK)
        return out;
    if (out == NULL && PyErr_Occurred())
        return NULL;
    Py_XDECREF(out);
    return status_result(st);
}

/* -------------------------------------------------------------- AES-GCM -- */

/* Argument parsing shared by seal and open: (key, nonce, data, aad, tag_len).
 * Returns -1 with an exception set, or 0 with all three buffers held. */
static int gcm_args(PyObject *const *args, Py_ssize_t nargs, const char *name, void **key,
                    ro_arg *nonce, ro_arg *data, ro_arg *aad, Py_ssize_t *tag_len)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "%s takes 5 arguments (%zd given)", name, nargs);
        return -1;
    }
    *key = PyLong_AsVoidPtr(args[0]);
    if (*key == NULL && PyErr_Occurred())
        return -1;
    *tag_len = PyLong_AsSsize_t(args[4]);
    if (*tag_len == -1 && PyErr_Occurred())
        return -1;
    if (ro_get(args[1], nonce, 0))
        return -1;
    if (ro_get(args[2], data, 1)) {
        ro_release(nonce);
        return -1;
    }
    if (ro_get(args[3], aad, 1)) {
        ro_release(data);
        ro_release(nonce);
        return -1;
    }
    return 0;
}

/*
 * gcm_seal(key_addr, nonce, data, aad, tag_len) -> ciphertext || tag | status
 *
 * Result layout (one allocation, written once, by the library):
 *
 *     out: [ ciphertext: n bytes ][ tag: tag_len bytes ]
 *            ^ out                  ^ out + n
 */
static PyObject *seal_core(void *key, Py_ssize_t tl, const ro_arg *nonce, const ro_arg *data,
                           const ro_arg *aad)
{
    PyObject *out = NULL;
    int st;
    /* Sizes are checked before allocating: a bad tag length must not become
     * a write into the shared empty `bytes` (size 0 returns a singleton), and
     * an over-long message must not cost a huge allocation to be refused. */
    if (tl < 1 || tl > 16) {
        st = VC_ERR_TAG_LENGTH;
    } else if ((uint64_t)data->len > VC_GCM_MAX_DATA) {
        st = VC_ERR_DATA_LENGTH;
    } else {
        Py_ssize_t n = data->len;
        out = PyBytes_FromStringAndSize(NULL, n + tl); /* n + tl >= 1: a fresh object */
        if (out == NULL) {
            st = VC_ERR_NOMEM; /* MemoryError is set and propagates */
        } else {
            uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
            PyThreadState *ts = maybe_release(n, GCM_GIL_RELEASE_MIN);
            st = p_gcm_encrypt(key, nonce->p, (size_t)nonce->len, aad->p, (size_t)aad->len, data->p,
                               o, (size_t)n, o + n, (size_t)tl);
            maybe_restore(ts);
        }
    }
    return finish(out, st);
}

/* Shared by the two module-level entry points: parse, run the core, release. */
typedef PyObject *(*gcm_core_fn)(void *, Py_ssize_t, const ro_arg *, const ro_arg *,
                                 const ro_arg *);

static PyObject *gcm_entry(PyObject *const *args, Py_ssize_t nargs, const char *name, int bound,
                           gcm_core_fn core)
{
    void *key;
    ro_arg nonce, data, aad;
    Py_ssize_t tl;
    if (check_bound(bound, name) || gcm_args(args, nargs, name, &key, &nonce, &data, &aad, &tl))
        return NULL;
    PyObject *r = core(key, tl, &nonce, &data, &aad);
    ro_release(&aad);
    ro_release(&data);
    ro_release(&nonce);
    return r;
}

static PyObject *gcm_seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return gcm_entry(args, nargs, "gcm_seal", p_gcm_encrypt != NULL, seal_core);
}

/*
 * gcm_open(key_addr, nonce, data, aad, tag_len) -> plaintext | status
 *
 *     data: [ ciphertext: n bytes ][ tag: tag_len bytes ]   n = len(data) - tag_len
 *
 * Data shorter than the tag gives VC_ERR_AUTH without calling the library
 * (the Python layer words that case itself).  On VC_ERR_AUTH the library has
 * zeroed the n bytes it wrote; the object is freed and only the status is
 * returned, so the caller never sees unauthenticated plaintext.
 */
static PyObject *open_core(void *key, Py_ssize_t tl, const ro_arg *nonce, const ro_arg *data,
                           const ro_arg *aad)
{
    PyObject *out = NULL;
    int st;
    uint8_t sink[1]; /* out pointer for n == 0 (never write into b"") */
    if (tl < 1 || tl > 16) {
        st = VC_ERR_TAG_LENGTH;
    } else if (data->len < tl) {
        st = VC_ERR_AUTH;
    } else if ((uint64_t)(data->len - tl) > VC_GCM_MAX_DATA) {
        st = VC_ERR_DATA_LENGTH;
    } else {
        Py_ssize_t n = data->len - tl;
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out == NULL) {
            st = VC_ERR_NOMEM;
        } else {
            uint8_t *o = n ? (uint8_t *)PyBytes_AS_STRING(out) : sink;
            const uint8_t *in = data->p;
            PyThreadState *ts = maybe_release(n, GCM_GIL_RELEASE_MIN);
            st = p_gcm_decrypt(key, nonce->p, (size_t)nonce->len, aad->p, (size_t)aad->len, in, o,
                               (size_t)n, in + n, (size_t)tl);
            maybe_restore(ts);
        }
    }
    return finish(out, st);
}

static PyObject *gcm_open(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return gcm_entry(args, nargs, "gcm_open", p_gcm_decrypt != NULL, open_core);
}

/* ------------------------------------------------------------- AES-CFB -- */

/*
 * cfb_encrypt / cfb_decrypt (key_addr, iv, data) -> bytes | status
 *
 * Byte-oriented segment sizes only (CFB128, CFB8): the length passed to the
 * library is a byte count.  The Python layer never routes a CFB1 key here
 * (there the length would be a bit count).  vc_cfb_* takes the IV without a
 * length, so its length is checked here: the library reads 16 bytes.
 */
static PyObject *cfb_call(PyObject *const *args, Py_ssize_t nargs, const char *name, cfb_fn fn,
                          Py_ssize_t gil_release_min)
{
    if (check_bound(fn != NULL, name))
        return NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes 3 arguments (%zd given)", name, nargs);
        return NULL;
    }
    void *key = PyLong_AsVoidPtr(args[0]);
    if (key == NULL && PyErr_Occurred())
        return NULL;
    ro_arg iv, data;
    if (ro_get(args[1], &iv, 0))
        return NULL;
    if (ro_get(args[2], &data, 0)) {
        ro_release(&iv);
        return NULL;
    }

    PyObject *out = NULL;
    int st;
    uint8_t sink[1];
    if (iv.len != 16) {
        st = VC_ERR_IV_LENGTH;
    } else {
        Py_ssize_t n = data.len;
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out == NULL) {
            st = VC_ERR_NOMEM;
        } else {
            uint8_t *o = n ? (uint8_t *)PyBytes_AS_STRING(out) : sink;
            PyThreadState *ts = maybe_release(n, gil_release_min);
            st = fn(key, iv.p, data.p, o, (size_t)n);
            maybe_restore(ts);
        }
    }
    ro_release(&data);
    ro_release(&iv);
    return finish(out, st);
}

static PyObject *cfb_encrypt(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return cfb_call(args, nargs, "cfb_encrypt", p_cfb_encrypt, CFB_ENCRYPT_GIL_RELEASE_MIN);
}

static PyObject *cfb_decrypt(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return cfb_call(args, nargs, "cfb_decrypt", p_cfb_decrypt, CFB_DECRYPT_GIL_RELEASE_MIN);
}

/* ----------------------------------------------------------------- keys -- */

/*
 * KeyRef: owns one native key (GCM or CFB).  Immutable, not subclassable, no
 * cycles (it references no Python object), so no GC tracking: creating and
 * dropping one is a plain allocation.  The free function is the library's
 * own vc_*_key_free, which wipes the key material before freeing it.
 */
typedef struct {
    PyObject_HEAD
    void *key;
    void (*free_key)(void *);
    Py_ssize_t tag_len; /* GCM: the object's tag length (for FastMethod); CFB: 0 */
} KeyRef;

static void keyref_dealloc(PyObject *o)
{
    KeyRef *r = (KeyRef *)o;
    if (r->key)
        r->free_key(r->key);
    PyObject_Free(o);
}

static PyObject *keyref_addr(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(((KeyRef *)o)->key);
}

static PyGetSetDef keyref_getset[] = {
    {"addr", keyref_addr, NULL, "address of the native key (an int)", NULL},
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

/* A KeyRef for a key just made, or NULL (MemoryError set) after freeing it. */
static PyObject *keyref_new(void *key, void (*free_key)(void *))
{
    KeyRef *r = PyObject_New(KeyRef, &KeyRef_Type);
    if (r == NULL) {
        free_key(key);
        return NULL;
    }
    r->key = key;
    r->free_key = free_key;
    r->tag_len = 0;
    return (PyObject *)r;
}

/* The library's free functions take typed pointers; calling one through a
 * void (*)(void *) would be undefined behaviour, so each gets a thunk. */
static void free_gcm_key(void *k) { p_gcm_key_free((vc_gcm_key *)k); }
static void free_cfb_key(void *k) { p_cfb_key_free((vc_cfb_key *)k); }

/* An int argument that must fit a C int (impl codes, segment sizes). */
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

/* (key, int a, int b), as both key constructors take them: 0, or -1 with an
 * exception set.  The key buffer is held on success (ro_release it). */
static int key_args(PyObject *const *args, Py_ssize_t nargs, const char *name, int bound,
                    ro_arg *key, int *a, int *b)
{
    if (check_bound(bound, name))
        return -1;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes 3 arguments (%zd given)", name, nargs);
        return -1;
    }
    if (int_arg(args[1], a) || int_arg(args[2], b))
        return -1;
    return ro_get(args[0], key, 0);
}

/* gcm_key_new(key, impl, tag_len) -> KeyRef | status   (vc_gcm_key_new's
 * checks apply; tag_len, 1..16, is what the object's FastMethods use) */
static PyObject *gcm_key_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    int impl, tl;
    ro_arg key;
    if (key_args(args, nargs, "gcm_key_new", p_gcm_key_new != NULL, &key, &impl, &tl))
        return NULL;
    vc_gcm_key *k = NULL;
    const int st = tl < 1 || tl > 16 ? VC_ERR_TAG_LENGTH
                                     : p_gcm_key_new(&k, key.p, (size_t)key.len, impl);
    ro_release(&key);
    if (st != VC_OK)
        return status_result(st);
    PyObject *r = keyref_new(k, free_gcm_key);
    if (r != NULL)
        ((KeyRef *)r)->tag_len = tl;
    return r;
}

/* cfb_key_new(key, segment_bits, impl) -> KeyRef | status */
static PyObject *cfb_key_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    int seg, impl;
    ro_arg key;
    if (key_args(args, nargs, "cfb_key_new", p_cfb_key_new != NULL, &key, &seg, &impl))
        return NULL;
    vc_cfb_key *k = NULL;
    const int st = p_cfb_key_new(&k, key.p, (size_t)key.len, seg, impl);
    ro_release(&key);
    if (st != VC_OK)
        return status_result(st);
    return keyref_new(k, free_cfb_key);
}

/* --------------------------------------------------------- FastMethod -- */

/*
 * AESGCM.encrypt / .decrypt as C methods.
 *
 * Even with gcm_seal in C, a Python-level method in front of it (a frame,
 * three type checks, two attribute loads) cost ~90 ns a call: as much as the
 * whole AES-GCM of a 64-byte message.  A FastMethod is a class attribute that
 * behaves like a method defined in C:
 *
 *   g.encrypt(nonce, data, aad)
 *     -> CPython sees Py_TPFLAGS_METHOD_DESCRIPTOR, skips binding and
 *        vectorcalls the FastMethod with args = (g, nonce, data, aad)
 *     -> fast case: no keywords, exact `bytes` (aad may be None), g._ref a
 *        KeyRef: seal_core / open_core straight into a new `bytes`
 *     -> anything else, and every refusal by the library: the Python
 *        function it wraps (`slow`), called with the very same arguments.
 *        That function is the complete method (buffer arguments, keywords,
 *        the error wording), so the fast case only ever adds speed.
 *
 * On a GCM tag mismatch the fast case has already zeroed and freed its
 * output; `slow` then checks the message again and raises InvalidTag.
 */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int op;          /* FM_SEAL / FM_OPEN */
    PyObject *slow;  /* the complete Python method: slow(self, nonce, data, aad) */
    long long hits;  /* calls answered by the fast case (tests read it) */
} FastMethod;

enum { FM_SEAL = 0, FM_OPEN = 1 };

static PyObject *str_ref; /* interned "_ref" */

/* The fast case; NULL with no exception set means "not for me". */
static PyObject *fm_try(FastMethod *m, PyObject *const *args)
{
    PyObject *nonce = args[1], *data = args[2], *aad = args[3];
    if (!PyBytes_CheckExact(nonce) || !PyBytes_CheckExact(data) ||
        (aad != Py_None && !PyBytes_CheckExact(aad)))
        return NULL;
    PyObject *ref = PyObject_GetAttr(args[0], str_ref);
    if (ref == NULL) {
        PyErr_Clear(); /* not an AESGCM: let the Python method say so */
        return NULL;
    }
    PyObject *r = NULL;
    if (Py_IS_TYPE(ref, &KeyRef_Type) && ((KeyRef *)ref)->tag_len > 0) {
        const KeyRef *k = (const KeyRef *)ref;
        ro_arg n, d, a;
        /* exact bytes / None: ro_get exports no buffer and cannot fail */
        ro_get(nonce, &n, 0);
        ro_get(data, &d, 1);
        ro_get(aad, &a, 1);
        r = m->op == FM_SEAL ? seal_core(k->key, k->tag_len, &n, &d, &a)
                             : open_core(k->key, k->tag_len, &n, &d, &a);
        if (r != NULL && PyLong_CheckExact(r)) { /* refused: the slow path words it */
            Py_DECREF(r);
            r = NULL;
        } else if (r != NULL) {
            m->hits++;
        }
    }
    Py_DECREF(ref);
    return r;
}

static PyObject *fm_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    FastMethod *m = (FastMethod *)callable;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == 4) {
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
    int op;
    if (strcmp(kind, "gcm_seal") == 0 && p_gcm_encrypt != NULL)
        op = FM_SEAL;
    else if (strcmp(kind, "gcm_open") == 0 && p_gcm_decrypt != NULL)
        op = FM_OPEN;
    else {
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
    m->op = op;
    m->hits = 0;
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
    {"bind_gcm", (PyCFunction)(void (*)(void))bind_gcm, METH_FASTCALL,
     "bind_gcm(encrypt_addr, decrypt_addr): addresses of vc_gcm_encrypt/decrypt."},
    {"bind_cfb", (PyCFunction)(void (*)(void))bind_cfb, METH_FASTCALL,
     "bind_cfb(encrypt_addr, decrypt_addr): addresses of vc_cfb_encrypt/decrypt."},
    {"bind_gcm_key", (PyCFunction)(void (*)(void))bind_gcm_key, METH_FASTCALL,
     "bind_gcm_key(new_addr, free_addr): addresses of vc_gcm_key_new/free."},
    {"bind_cfb_key", (PyCFunction)(void (*)(void))bind_cfb_key, METH_FASTCALL,
     "bind_cfb_key(new_addr, free_addr): addresses of vc_cfb_key_new/free."},
    {"gcm_key_new", (PyCFunction)(void (*)(void))gcm_key_new, METH_FASTCALL,
     "gcm_key_new(key, impl, tag_len) -> KeyRef owning a new GCM key, or a vc_status int."},
    {"cfb_key_new", (PyCFunction)(void (*)(void))cfb_key_new, METH_FASTCALL,
     "cfb_key_new(key, segment_bits, impl) -> KeyRef owning a new CFB key, or a vc_status int."},
    {"gcm_seal", (PyCFunction)(void (*)(void))gcm_seal, METH_FASTCALL,
     "gcm_seal(key_addr, nonce, data, aad, tag_len) -> ciphertext||tag, or a vc_status int."},
    {"gcm_open", (PyCFunction)(void (*)(void))gcm_open, METH_FASTCALL,
     "gcm_open(key_addr, nonce, data, aad, tag_len) -> plaintext, or a vc_status int."},
    {"cfb_encrypt", (PyCFunction)(void (*)(void))cfb_encrypt, METH_FASTCALL,
     "cfb_encrypt(key_addr, iv, data) -> bytes, or a vc_status int (CFB128/CFB8 keys)."},
    {"cfb_decrypt", (PyCFunction)(void (*)(void))cfb_decrypt, METH_FASTCALL,
     "cfb_decrypt(key_addr, iv, data) -> bytes, or a vc_status int (CFB128/CFB8 keys)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "vaescrypt._fastcall",
    .m_doc = "METH_FASTCALL one-shot AES-GCM / AES-CFB entry points (private).",
    .m_size = -1, /* process-global state, like the library it calls */
    .m_methods = fastcall_methods,
};

PyMODINIT_FUNC PyInit__fastcall(void)
{
    if (PyType_Ready(&KeyRef_Type) < 0 || PyType_Ready(&FastMethod_Type) < 0)
        return NULL;
    if (str_ref == NULL && (str_ref = PyUnicode_InternFromString("_ref")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&fastcall_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KeyRef_Type);
    if (PyModule_AddObject(m, "KeyRef", (PyObject *)&KeyRef_Type) < 0) {
        Py_DECREF(&KeyRef_Type);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FastMethod_Type);
    if (PyModule_AddObject(m, "FastMethod", (PyObject *)&FastMethod_Type) < 0) {
        Py_DECREF(&FastMethod_Type);
        Py_DECREF(m);
        return NULL;
    }
    /* The thresholds, for tests and benchmarks. */
    if (PyModule_AddIntConstant(m, "GCM_GIL_RELEASE_MIN", (long)GCM_GIL_RELEASE_MIN) ||
        PyModule_AddIntConstant(m, "CFB_ENCRYPT_GIL_RELEASE_MIN",
                                (long)CFB_ENCRYPT_GIL_RELEASE_MIN) ||
        PyModule_AddIntConstant(m, "CFB_DECRYPT_GIL_RELEASE_MIN",
                                (long)CFB_DECRYPT_GIL_RELEASE_MIN)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
