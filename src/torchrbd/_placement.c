/* torchrbd._placement: batch-last rows placed into batch-first rows.

   out[b * ldo + j] = src[index[j] * ld + b]   for b < B, j < P

   src holds K rows of B numbers (batch-last, row stride ld), out B rows (batch-first,
   row stride ldo). The numbers are
   copied as 4- or 8-byte words, so the kernel serves every dtype of those sizes, bit
   for bit.

   Why a kernel of our own: torch's CPU gather (and every transposing copy it has) costs
   about 1 ns per number here, mostly per-element index work; iCub's mass matrix at
   B = 1024 places 861K numbers. This loop takes the configurations by whole cache lines
   of the source (8 float64 or 16 float32 numbers): each entry j reads one line and
   writes one number into each of those configurations' output rows, which are written
   front to back. Threads share the configurations (OpenMP, the thread count given by
   the caller: torch's).

   place_zeroed: the same for up to four sources (each rows 0..P-1 in order, into its
   own columns) into rows of `width` numbers that it zeroes first: each block of
   configurations' rows are zeroed and filled while they sit in the L1 cache, where a
   zero fill of the whole result before the placing made one more pass over memory
   (a Jacobian's result is mostly zeros: iCub's l_sole has 72 nonzero of 174). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PLACE(NAME, WORD, LINE)                                                          \
    static void NAME(const WORD *src, int64_t ld, const int64_t *index, int64_t P,      \
                     int64_t B, WORD *out, int64_t ldo, int threads) {                  \
        const int64_t blocks = B / (LINE);                                              \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t c = 0; c < blocks; ++c) {                                          \
            const int64_t b = c * (LINE);                                               \
            WORD *o = out + b * ldo;                                                    \
            for (int64_t j = 0; j < P; ++j) {                                           \
                const WORD *s = src + index[j] * ld + b;                                \
                WORD *oj = o + j;                                                       \
                for (int i = 0; i < (LINE); ++i) oj[i * ldo] = s[i];                    \
            }                                                                           \
        }                                                                               \
        for (int64_t b = blocks * (LINE); b < B; ++b)                                   \
            for (int64_t j = 0; j < P; ++j)                                             \
                out[b * ldo + j] = src[index[j] * ld + b];                              \
    }

PLACE(place8, uint64_t, 8)
PLACE(place4, uint32_t, 16)

#define MAX_PARTS 4

typedef struct {
    uintptr_t src;          /* rows 0..P-1 of B numbers, row stride ld */
    int64_t ld, P;
    const int64_t *column;  /* where row j goes in an output row */
} Part;

#define PLACE_ZEROED(NAME, WORD, LINE)                                                   \
    static void NAME(const Part *parts, int nparts, int64_t B, WORD *out, int64_t ldo,  \
                     int64_t width, int threads) {                                      \
        const int64_t blocks = (B + (LINE) - 1) / (LINE);                               \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t c = 0; c < blocks; ++c) {                                          \
            const int64_t b = c * (LINE), n = B - b < (LINE) ? B - b : (LINE);          \
            WORD *o = out + b * ldo;                                                    \
            if (width == ldo)                                                           \
                memset(o, 0, n * ldo * sizeof(WORD));                                   \
            else                                                                        \
                for (int64_t i = 0; i < n; ++i) memset(o + i * ldo, 0, width * sizeof(WORD)); \
            for (int k = 0; k < nparts; ++k) {                                          \
                const WORD *src = (const WORD *)parts[k].src;                           \
                for (int64_t j = 0; j < parts[k].P; ++j) {                              \
                    const WORD *s = src + j * parts[k].ld + b;                          \
                    WORD *oj = o + parts[k].column[j];                                  \
                    if (n == (LINE))                                                    \
                        for (int i = 0; i < (LINE); ++i) oj[i * ldo] = s[i];            \
                    else                                                                \
                        for (int64_t i = 0; i < n; ++i) oj[i * ldo] = s[i];             \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    }

PLACE_ZEROED(place_zeroed8, uint64_t, 8)
PLACE_ZEROED(place_zeroed4, uint32_t, 16)

static PyObject *place(PyObject *self, PyObject *args) {
    unsigned long long src, index, out;
    long long ld, P, B, ldo;
    int itemsize, threads;
    if (!PyArg_ParseTuple(args, "KLKLLKLii", &src, &ld, &index, &P, &B, &out, &ldo, &itemsize, &threads))
        return NULL;
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "place: numbers of 4 or 8 bytes only");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (itemsize == 8)
        place8((const uint64_t *)(uintptr_t)src, ld, (const int64_t *)(uintptr_t)index, P, B,
               (uint64_t *)(uintptr_t)out, ldo, threads);
    else
        place4((const uint32_t *)(uintptr_t)src, ld, (const int64_t *)(uintptr_t)index, P, B,
               (uint32_t *)(uintptr_t)out, ldo, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *place_zeroed(PyObject *self, PyObject *args) {
    unsigned long long out;
    long long B, ldo, width;
    int itemsize, threads;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "KLLLiiO", &out, &ldo, &width, &B, &itemsize, &threads, &seq))
        return NULL;
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "place_zeroed: numbers of 4 or 8 bytes only");
        return NULL;
    }
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > MAX_PARTS) {
        PyErr_SetString(PyExc_ValueError, "place_zeroed: parts must be a tuple of at most 4 (src, ld, column, P)");
        return NULL;
    }
    Part parts[MAX_PARTS];
    const int nparts = (int)PyTuple_GET_SIZE(seq);
    for (int k = 0; k < nparts; ++k) {
        unsigned long long src, column;
        long long ld, P;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seq, k), "KLKL", &src, &ld, &column, &P))
            return NULL;
        parts[k].src = (uintptr_t)src;
        parts[k].ld = ld;
        parts[k].P = P;
        parts[k].column = (const int64_t *)(uintptr_t)column;
    }
    Py_BEGIN_ALLOW_THREADS
    if (itemsize == 8)
        place_zeroed8(parts, nparts, B, (uint64_t *)(uintptr_t)out, ldo, width, threads);
    else
        place_zeroed4(parts, nparts, B, (uint32_t *)(uintptr_t)out, ldo, width, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(src, ld, index, P, B, out, ldo, itemsize, threads): "
     "out[b*ldo + j] = src[index[j]*ld + b] for j < P, b < B (addresses as integers, "
     "index int64; numbers of itemsize 4 or 8 bytes)"},
    {"place_zeroed", place_zeroed, METH_VARARGS,
     "place_zeroed(out, ldo, width, B, itemsize, threads, parts): for b < B, out[b*ldo + i] = 0 for "
     "i < width, then out[b*ldo + column[j]] = src[j*ld + b] for each part (src, ld, column, P) "
     "of at most 4 and j < P (addresses as integers, column int64)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_placement",
                                    "Batch-last rows placed into batch-first rows.", -1, methods};

PyMODINIT_FUNC PyInit__placement(void) { return PyModule_Create(&module); }
