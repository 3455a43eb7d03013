/* Hot loops that profiling showed Python cannot do fast enough (see shoal/protocol/records.py).
 * Optional: records.py falls back to its pure-Python versions when this is not built. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Varint (zigzag) of at most ``maxbytes`` bytes at b[*pos], not beyond ``end``; 0, or -1 if bad. */
static inline int read_varint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int maxbytes, long long *out) {
    if (*pos < end && b[*pos] < 0x80) { /* most fields of most records: one byte */
        unsigned char c = b[(*pos)++];
        *out = (long long)(c >> 1) ^ -(long long)(c & 1);
        return 0;
    }
    unsigned long long v = 0;
    int shift = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (*pos >= end)
            return -1;
        unsigned char c = b[(*pos)++];
        v |= (unsigned long long)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *out = (long long)(v >> 1) ^ -(long long)(v & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

#define VARINT(out, limit)                                                              \
    if (read_varint(b, &pos, (limit), 5, &(out)) || (out) < INT32_MIN_ || (out) > INT32_MAX_) \
        goto malformed;
#define INT32_MIN_ (-2147483648LL)
#define INT32_MAX_ 2147483647LL

/* check_records(buf, pos, end, count, need_key, strict)
 *   -> (status, index, min_ts_delta, max_ts_delta, keyless)
 *
 * Walks the records of a v2 batch in buf[pos:end] (the records section, decompressed) as Kafka's
 * DefaultRecord.readFrom does, checking every length and varint against the record's and the
 * section's bounds. status: 0 ok; 1 fewer records than ``count``; 2 bytes left after ``count``
 * records; 3 record ``index`` malformed; 4 record ``index`` has offset delta != index (``strict``, a
 * producer's batch) or not above the previous record's (a stored batch the cleaner left gaps in). With status 0
 * or 1 ``index`` is the number of records read. ``keyless``: the indexes of the records with a null
 * key when ``need_key`` (else None). Time deltas are those of the records read. */
static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, count;
    int need_key, strict;
    long long prev_od = -1;
    if (!PyArg_ParseTuple(args, "y*nnnpp", &view, &pos, &end, &count, &need_key, &strict))
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    int status = 0;
    Py_ssize_t i = 0;
    long long min_ts = 0, max_ts = 0;
    PyObject *keyless = NULL;
    if (need_key && !(keyless = PyList_New(0))) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pos < 0 || end > view.len || pos > end) {
        status = 3;
        goto done;
    }
    for (; pos < end; i++) {
        long long length, tsd, od, kl, vl, nh, hk, hv;
        if (i >= count) {
            status = 2;
            goto done;
        }
        VARINT(length, end);
        if (length <= 0 || length > end - pos)
            goto malformed;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos++; /* attributes */
        if (read_varint(b, &pos, rec_end, 10, &tsd))
            goto malformed;
        VARINT(od, rec_end);
        if (strict ? od != i : od <= prev_od) {
            status = 4;
            goto done;
        }
        prev_od = od;
        VARINT(kl, rec_end);
        if (kl < -1 || kl > rec_end - pos)
            goto malformed;
        if (kl >= 0)
            pos += (Py_ssize_t)kl;
        else if (keyless) {
            PyObject *idx = PyLong_FromSsize_t(i);
            if (!idx || PyList_Append(keyless, idx)) {
                Py_XDECREF(idx);
                Py_DECREF(keyless);
                PyBuffer_Release(&view);
                return NULL;
            }
            Py_DECREF(idx);
        }
        VARINT(vl, rec_end);
        if (vl < -1 || vl > rec_end - pos)
            goto malformed;
        if (vl > 0)
            pos += (Py_ssize_t)vl;
        VARINT(nh, rec_end);
        if (nh < 0)
            goto malformed;
        for (long long h = 0; h < nh; h++) {
            VARINT(hk, rec_end);
            if (hk < 0 || hk > rec_end - pos)
                goto malformed;
            pos += (Py_ssize_t)hk;
            VARINT(hv, rec_end);
            if (hv < -1 || hv > rec_end - pos)
                goto malformed;
            if (hv > 0)
                pos += (Py_ssize_t)hv;
        }
        if (pos != rec_end)
            goto malformed;
        if (i == 0 || tsd < min_ts)
            min_ts = tsd;
        if (i == 0 || tsd > max_ts)
            max_ts = tsd;
    }
    if (i < count)
        status = 1;
    goto done;
malformed:
    status = 3;
done:
    PyBuffer_Release(&view);
    if (!keyless) {
        keyless = Py_None;
        Py_INCREF(Py_None);
    }
    return Py_BuildValue("inLLN", status, i, min_ts, max_ts, keyless);
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "Walk the records of a batch's records section: (status, index, min_ts_delta, max_ts_delta, keyless)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "shoal._native.speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit_speedups(void) { return PyModule_Create(&module); }
