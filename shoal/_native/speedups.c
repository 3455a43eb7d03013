/* Hot loops that profiling showed Python cannot do fast enough (see shoal/protocol/records.py).
 * Optional: records.py falls back to its pure-Python versions when this is not built. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* count_records(buf, pos, end) -> number of records whose varint length prefixes exactly fill
 * buf[pos:end], or -1 when they do not (a record of length <= 0, a bad varint, an overrun). */
static PyObject *count_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &end))
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    long long count = 0;
    if (pos < 0 || end > view.len || pos > end) {
        PyBuffer_Release(&view);
        return PyLong_FromLong(-1);
    }
    while (pos < end) {
        unsigned long long v = 0;
        int shift = 0;
        for (;;) {
            if (pos >= end || shift > 28) {
                PyBuffer_Release(&view);
                return PyLong_FromLong(-1);
            }
            unsigned char c = b[pos++];
            v |= (unsigned long long)(c & 0x7F) << shift;
            if (!(c & 0x80))
                break;
            shift += 7;
        }
        long long length = (long long)(v >> 1) ^ -(long long)(v & 1);
        if (length <= 0 || length > end - pos) {
            PyBuffer_Release(&view);
            return PyLong_FromLong(-1);
        }
        pos += length;
        count++;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(count);
}

static PyMethodDef methods[] = {
    {"count_records", count_records, METH_VARARGS, "Count length-prefixed records filling buf[pos:end], or -1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "shoal._native.speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit_speedups(void) { return PyModule_Create(&module); }
