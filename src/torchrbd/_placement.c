/* torchrbd._placement: batch-last rows placed into batch-first rows.

   out[b * ldo + column[j]] = src[index[j] * ld + b]   for b < B, j < P

   src holds K rows of B numbers (batch-last, row stride ld), out B rows (batch-first,
   row stride ldo); column[j] = j where no column array is given. The numbers are
   copied as 4- or 8-byte words, so the kernel serves every dtype of those sizes, bit
   for bit.

   Why a kernel of our own: torch's CPU gather (and every transposing copy it has) costs
   about 1 ns per number here, mostly per-element index work; iCub's mass matrix at
   B = 1024 places 861K numbers. This loop takes the configurations by whole cache lines
   of the source (8 float64 or 16 float32 numbers): each entry j reads one line and
   writes one number into each of those configurations' output rows, which are written
   front to back. Threads share the configurations (OpenMP, the thread count given by
   the caller: torch's). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PLACE(NAME, WORD, LINE)                                                          \
    static void NAME(const WORD *src, int64_t ld, const int64_t *index, const int64_t *column, \
                     int64_t P, int64_t B, WORD *out, int64_t ldo, int threads) {       \
        const int64_t blocks = B / (LINE);                                              \
        _Pragma("omp parallel for schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t c = 0; c < blocks; ++c) {                                          \
            const int64_t b = c * (LINE);                                               \
            WORD *o = out + b * ldo;                                                    \
            for (int64_t j = 0; j < P; ++j) {                                           \
                const WORD *s = src + index[j] * ld + b;                                \
                WORD *oj = o + (column ? column[j] : j);                                \
                for (int i = 0; i < (LINE); ++i) oj[i * ldo] = s[i];                    \
            }                                                                           \
        }                                                                               \
        for (int64_t b = blocks * (LINE); b < B; ++b)                                   \
            for (int64_t j = 0; j < P; ++j)                                             \
                out[b * ldo + (column ? column[j] : j)] = src[index[j] * ld + b];       \
    }

PLACE(place8, uint64_t, 8)
PLACE(place4, uint32_t, 16)

static PyObject *place(PyObject *self, PyObject *args) {
    unsigned long long src, index, column, out;
    long long ld, P, B, ldo;
    int itemsize, threads;
    if (!PyArg_ParseTuple(args, "KLKKLLKLii", &src, &ld, &index, &column, &P, &B, &out, &ldo, &itemsize,
                          &threads))
        return NULL;
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "place: numbers of 4 or 8 bytes only");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (itemsize == 8)
        place8((const uint64_t *)(uintptr_t)src, ld, (const int64_t *)(uintptr_t)index,
               (const int64_t *)(uintptr_t)column, P, B, (uint64_t *)(uintptr_t)out, ldo, threads);
    else
        place4((const uint32_t *)(uintptr_t)src, ld, (const int64_t *)(uintptr_t)index,
               (const int64_t *)(uintptr_t)column, P, B, (uint32_t *)(uintptr_t)out, ldo, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"place", place, METH_VARARGS,
     "place(src, ld, index, column, P, B, out, ldo, itemsize, threads): "
     "out[b*ldo + column[j]] = src[index[j]*ld + b] for j < P, b < B (addresses as integers, "
     "column 0 for column[j] = j; index and column int64; numbers of itemsize 4 or 8 bytes)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_placement",
                                    "Batch-last rows placed into batch-first rows.", -1, methods};

PyMODINIT_FUNC PyInit__placement(void) { return PyModule_Create(&module); }
