/* cffi declarations: what the Python binding may call.  Plain declarations
 * mirroring native/include/vaescrypt.h and dispatch/include/vc_dispatch.h
 * (API mode: the C compiler checks them against the real headers). */

typedef enum vc_path {
    VC_PATH_GENERIC = 0,
    VC_PATH_AESNI = 1,
    VC_PATH_VAES_AVX2 = 2,
    VC_PATH_AVX10_256 = 3,
    VC_PATH_AVX512 = 4,
    VC_PATH_COUNT = 5
} vc_path;

static const int VC_PATH_AUTO;

typedef enum vc_mode {
    VC_MODE_GCM = 0,
    VC_MODE_CFB128 = 1,
    VC_MODE_CFB8 = 2,
    VC_MODE_CFB1 = 3,
    VC_MODE_COUNT = 4
} vc_mode;

typedef enum vc_dir {
    VC_DIR_ENCRYPT = 0,
    VC_DIR_DECRYPT = 1,
    VC_DIR_COUNT = 2
} vc_dir;

typedef enum vc_feature {
    VC_F_AES = 0,
    VC_F_PCLMULQDQ,
    VC_F_SSE41,
    VC_F_AVX,
    VC_F_AVX2,
    VC_F_BMI2,
    VC_F_AVX512F,
    VC_F_AVX512VL,
    VC_F_AVX512BW,
    VC_F_AVX512DQ,
    VC_F_VAES,
    VC_F_VPCLMULQDQ,
    VC_F_AVX10,
    VC_F_AVX10_256,
    VC_F_AVX10_512,
    VC_F_OS_YMM,
    VC_F_OS_EVEX,
    VC_F_PREFER_YMM,
    VC_F_SSE3,
    VC_F_SSSE3,
    VC_F_SSE42,
    VC_F_POPCNT,
    VC_F_XSAVE,
    VC_F_COUNT
} vc_feature;

typedef struct vc_cpu_features {
    uint32_t bits;
    uint32_t detected_bits;
    uint8_t avx10_version;
    char vendor[13];
    uint32_t family, model, stepping;
    uint64_t xcr0;
} vc_cpu_features;

typedef struct vc_cpuid_leaf {
    uint32_t leaf, subleaf, eax, ebx, ecx, edx;
} vc_cpuid_leaf;

void vc_features_from_cpuid(vc_cpu_features *out, const vc_cpuid_leaf *leaves,
                            int n, uint64_t xcr0);
const vc_cpu_features *vc_cpu_features_get(void);
const char *vc_dispatch_error(void);
const char *vc_feature_name(vc_feature f);
const char *vc_path_name(vc_path p);
const char *vc_mode_name(vc_mode m);
const char *vc_dir_name(vc_dir d);
int vc_path_from_name(const char *name);
int vc_mode_from_name(const char *name);
int vc_path_supported(const vc_cpu_features *f, vc_path p);
int vc_path_supported_for(const vc_cpu_features *f, vc_mode m, vc_path p);
int vc_path_eligible(vc_mode m, vc_dir d, vc_path p);
int vc_path_implemented(vc_mode m, vc_dir d, vc_path p);
vc_path vc_select_with(const vc_cpu_features *f, vc_mode m, vc_dir d);
vc_path vc_select(vc_mode m, vc_dir d);
int vc_available(vc_mode m, vc_dir d, int out[]);
int vc_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, char *buf, int buflen);

typedef enum vc_status {
    VC_OK = 0,
    VC_ERR_KEY_LENGTH = -1,
    VC_ERR_IV_LENGTH = -2,
    VC_ERR_TAG_LENGTH = -3,
    VC_ERR_UNSUPPORTED = -4,
    VC_ERR_INELIGIBLE = -5,
    VC_ERR_AUTH = -6,
    VC_ERR_DATA_LENGTH = -7,
    VC_ERR_STATE = -8,
    VC_ERR_NOMEM = -9,
    VC_ERR_ARGUMENT = -10,
    VC_ERR_CPU_MASK = -11,
    VC_ERR_OVERLAP = -12,
    VC_ERR_OBJECT = -13,
    VC_ERR_FORKED = -14
} vc_status;

const char *vc_status_message(int status);

static const uint64_t VC_GCM_MAX_DATA;
static const uint64_t VC_GCM_MAX_AAD;
static const uint64_t VC_GCM_MAX_IV;

typedef struct vc_gcm_key vc_gcm_key;
typedef struct vc_gcm_stream vc_gcm_stream;

int vc_gcm_key_new(vc_gcm_key **out, const uint8_t *key, size_t key_len, int impl);
void vc_gcm_key_free(vc_gcm_key *k);
int vc_gcm_key_path(const vc_gcm_key *k, int dir);
int vc_gcm_encrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len,
                   const uint8_t *aad, size_t aad_len, const uint8_t *in,
                   uint8_t *out, size_t len, uint8_t *tag, size_t tag_len);
int vc_gcm_decrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len,
                   const uint8_t *aad, size_t aad_len, const uint8_t *in,
                   uint8_t *out, size_t len, const uint8_t *tag, size_t tag_len);
int vc_gcm_stream_new(vc_gcm_stream **out, const vc_gcm_key *k, int dir,
                      const uint8_t *iv, size_t iv_len);
void vc_gcm_stream_free(vc_gcm_stream *s);
int vc_gcm_stream_aad(vc_gcm_stream *s, const uint8_t *aad, size_t len);
int vc_gcm_stream_update(vc_gcm_stream *s, const uint8_t *in, uint8_t *out, size_t len);
int vc_gcm_stream_finish(vc_gcm_stream *s, uint8_t *tag, size_t tag_len);

typedef struct vc_cfb_key vc_cfb_key;
typedef struct vc_cfb_stream vc_cfb_stream;

int vc_cfb_key_new(vc_cfb_key **out, const uint8_t *key, size_t key_len,
                   int segment_bits, int impl);
void vc_cfb_key_free(vc_cfb_key *k);
int vc_cfb_key_path(const vc_cfb_key *k, int dir);
int vc_cfb_encrypt(const vc_cfb_key *k, const uint8_t *iv, const uint8_t *in,
                   uint8_t *out, size_t len);
int vc_cfb_decrypt(const vc_cfb_key *k, const uint8_t *iv, const uint8_t *in,
                   uint8_t *out, size_t len);
int vc_cfb_stream_new(vc_cfb_stream **out, const vc_cfb_key *k, int dir,
                      const uint8_t *iv);
void vc_cfb_stream_free(vc_cfb_stream *s);
int vc_cfb_stream_update(vc_cfb_stream *s, const uint8_t *in, uint8_t *out, size_t len);

const char *vc_version(void);
