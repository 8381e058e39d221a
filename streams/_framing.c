/* The embedded log's per-record framing at C speed: `encode_block` and `whole_records`.
 *
 * The same functions as `streams.segment.encode_block` and `streams.segment.whole_records`
 * (pure Python, kept as the fallback and as the reference the property tests compare with):
 * byte for byte the same blocks, and the same records or None. Each `LogRecord` is Avro's
 * encoding of (offset, timestamp_ms, key, value, headers) followed by a CRC-32 (zlib's) of
 * those bytes as a long; longs are zigzag varints.
 *
 * `Record`s are made by writing their slots directly (the class is a frozen dataclass with
 * slots: its `__init__` costs more than the rest of a record's decoding). The slot offsets are
 * taken once from the class's member descriptors, checked to be plain object slots.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>
#include <time.h>

#define SYNC_SIZE 16
#define N_FIELDS 7
static const char *FIELDS[N_FIELDS] = {
    "topic", "partition", "offset", "key", "value", "timestamp_ms", "headers"};

static PyTypeObject *record_type = NULL;
static Py_ssize_t slot_offsets[N_FIELDS];
static PyObject *empty_tuple = NULL;
/* Classes whose instances never change once made (frozen dataclasses with slots, based on
 * object, every member a plain object slot): see `settled` below. */
static PyObject *immutable_types = NULL;

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct {
    unsigned char *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} Buffer;

static int buf_reserve(Buffer *b, Py_ssize_t more) {
    if (b->size + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->size + more) {
        if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        cap *= 2;
    }
    unsigned char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) { PyErr_NoMemory(); return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline void put_long(Buffer *b, int64_t n) {
    /* The caller reserved 10 bytes. */
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z & ~(uint64_t)0x7F) {
        b->data[b->size++] = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    b->data[b->size++] = (unsigned char)z;
}

static int put_bytes(Buffer *b, const char *data, Py_ssize_t size) {
    if (buf_reserve(b, size + 10) < 0) return -1;
    put_long(b, size);
    memcpy(b->data + b->size, data, (size_t)size);
    b->size += size;
    return 0;
}

/* An optional bytes field: the union branch (0: null, 1: bytes), then the bytes. */
static int put_optional(Buffer *b, PyObject *value, const char *what) {
    if (value == Py_None) {
        if (buf_reserve(b, 1) < 0) return -1;
        b->data[b->size++] = 0;
        return 0;
    }
    if (!PyBytes_Check(value)) {
        PyErr_Format(PyExc_TypeError, "a record's %s must be bytes or None, not %.100s", what,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    if (buf_reserve(b, 1) < 0) return -1;
    b->data[b->size++] = 2;
    return put_bytes(b, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
}

static int put_headers(Buffer *b, PyObject *headers) {
    PyObject *seq = PySequence_Fast(headers, "a record's headers must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    if (buf_reserve(b, 10) < 0) goto done;
    put_long(b, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i),
                                         "a header must be a (str, bytes) pair");
        if (pair == NULL) goto done;
        PyObject *key = NULL, *value = NULL;
        if (PySequence_Fast_GET_SIZE(pair) == 2) {
            key = PySequence_Fast_GET_ITEM(pair, 0);
            value = PySequence_Fast_GET_ITEM(pair, 1);
        }
        if (key == NULL || !PyUnicode_Check(key) || !PyBytes_Check(value)) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "a header must be a (str, bytes) pair");
            goto done;
        }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(key, &size);
        int failed = text == NULL || put_bytes(b, text, size) < 0 ||
                     put_bytes(b, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value)) < 0;
        Py_DECREF(pair);
        if (failed) goto done;
    }
    if (n) {
        if (buf_reserve(b, 1) < 0) goto done;
        b->data[b->size++] = 0;
    }
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static int get_long(PyObject *record, const char *name, int64_t *out) {
    PyObject *value = PyObject_GetAttrString(record, name);
    if (value == NULL) return -1;
    long long n = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (n == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)n;
    return 0;
}

static int encode_one(Buffer *b, PyObject *record) {
    int64_t offset, timestamp;
    if (get_long(record, "offset", &offset) < 0) return -1;
    if (get_long(record, "timestamp_ms", &timestamp) < 0) return -1;
    if (buf_reserve(b, 20) < 0) return -1;
    Py_ssize_t start = b->size;
    put_long(b, offset);
    put_long(b, timestamp);
    PyObject *field = PyObject_GetAttrString(record, "key");
    if (field == NULL) return -1;
    int rc = put_optional(b, field, "key");
    Py_DECREF(field);
    if (rc < 0) return -1;
    field = PyObject_GetAttrString(record, "value");
    if (field == NULL) return -1;
    rc = put_optional(b, field, "value");
    Py_DECREF(field);
    if (rc < 0) return -1;
    field = PyObject_GetAttrString(record, "headers");
    if (field == NULL) return -1;
    rc = PyObject_IsTrue(field);
    if (rc > 0) {
        rc = put_headers(b, field);
    } else if (rc == 0) {
        rc = buf_reserve(b, 1);
        if (rc == 0) b->data[b->size++] = 0;
    }
    Py_DECREF(field);
    if (rc < 0) return -1;
    uLong crc = crc32(0L, b->data + start, (uInt)(b->size - start));
    if (buf_reserve(b, 10) < 0) return -1;
    put_long(b, (int64_t)crc);
    return 0;
}

static PyObject *encode_block(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"records", "sync", NULL};
    PyObject *records;
    Py_buffer sync;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oy*:encode_block", names, &records, &sync))
        return NULL;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (seq == NULL) { PyBuffer_Release(&sync); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Buffer body = {NULL, 0, 0};
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (encode_one(&body, PySequence_Fast_GET_ITEM(seq, i)) < 0) goto done;
    }
    {
        /* The framing: count and size, the body, the sync marker. */
        Buffer head = {NULL, 0, 0};
        if (buf_reserve(&head, 20) < 0) goto done;
        put_long(&head, n);
        put_long(&head, body.size);
        out = PyBytes_FromStringAndSize(NULL, head.size + body.size + sync.len);
        if (out != NULL) {
            char *to = PyBytes_AS_STRING(out);
            memcpy(to, head.data, (size_t)head.size);
            if (body.size) memcpy(to + head.size, body.data, (size_t)body.size);
            memcpy(to + head.size + body.size, sync.buf, (size_t)sync.len);
        }
        PyMem_Free(head.data);
    }
done:
    PyMem_Free(body.data);
    Py_DECREF(seq);
    PyBuffer_Release(&sync);
    return out;
}

/* ---- decoding ---------------------------------------------------------------------- */

/* A zigzag varint at *pos (below end): 0 and the value, or -1 when the bytes end inside it
 * or it runs past 64 bits (the Python reader raises; `whole_records` then returns None). */
static inline int read_long(const unsigned char *d, Py_ssize_t end, Py_ssize_t *pos,
                            int64_t *out) {
    uint64_t n = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    while (1) {
        if (p >= end) return -1;
        unsigned char byte = d[p++];
        if (shift == 63 && (byte & 0x7F) > 1) return -1; /* past 64 bits: not a long */
        n |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) break;
        shift += 7;
        if (shift > 63) return -1;
    }
    *pos = p;
    *out = (int64_t)((n >> 1) ^ (~(n & 1) + 1));
    return 0;
}

/* A Record of these fields; takes the references to key, value and headers. */
static PyObject *new_record(PyObject *topic, PyObject *partition, int64_t offset,
                            PyObject *key, PyObject *value, int64_t timestamp,
                            PyObject *headers) {
    PyObject *fields[N_FIELDS];
    fields[0] = topic;
    Py_INCREF(topic);
    fields[1] = partition;
    Py_INCREF(partition);
    fields[2] = PyLong_FromLongLong(offset);
    fields[3] = key;
    fields[4] = value;
    fields[5] = PyLong_FromLongLong(timestamp);
    fields[6] = headers;
    PyObject *record = record_type->tp_alloc(record_type, 0);
    if (record == NULL || fields[2] == NULL || fields[5] == NULL) {
        for (int i = 0; i < N_FIELDS; i++) Py_XDECREF(fields[i]);
        Py_XDECREF(record);
        return NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        *(PyObject **)((char *)record + slot_offsets[i]) = fields[i];
    }
    /* Its fields are a str, ints, bytes or None and no headers: it can be part of no
     * reference cycle, so the collector need not walk it (as CPython does for a tuple of
     * such values). Decoded blocks are kept for the next poll: thousands of records. */
    if (headers == empty_tuple && PyObject_GC_IsTracked(record)) PyObject_GC_UnTrack(record);
    return record;
}

/* The bytes field of a union at *pos: 0 and a new reference (None or bytes), 1 when the
 * block is not whole (None is returned by the caller), -1 on a Python error. */
static int read_optional(const unsigned char *d, Py_ssize_t end, Py_ssize_t *pos,
                         PyObject **out) {
    Py_ssize_t p = *pos;
    if (p >= end) return 1;
    unsigned char tag = d[p];
    if (tag == 0) {
        *pos = p + 1;
        Py_INCREF(Py_None);
        *out = Py_None;
        return 0;
    }
    if (tag != 2) return 1;
    p += 1;
    int64_t size;
    if (read_long(d, end, &p, &size) < 0) return 1;
    if (size < 0 || size > end - p) return 1;
    *out = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)size);
    if (*out == NULL) return -1;
    *pos = p + (Py_ssize_t)size;
    return 0;
}

static PyObject *whole_records(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"data",  "at",    "end",       "first", "limit",
                            "count", "topic", "partition", NULL};
    Py_buffer buf;
    Py_ssize_t at, end, count;
    long long first;
    PyObject *limit_obj, *topic, *partition;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*nnLOnUO!:whole_records", names, &buf, &at,
                                     &end, &first, &limit_obj, &count, &topic, &PyLong_Type,
                                     &partition))
        return NULL;
    PyObject *records = NULL;
    long long limit = 0;
    int has_limit = limit_obj != Py_None;
    if (has_limit) {
        limit = PyLong_AsLongLong(limit_obj);
        if (limit == -1 && PyErr_Occurred()) goto fail;
    }
    if (at < 0 || end > buf.len || at > end) goto not_whole;
    const unsigned char *d = buf.buf;
    records = PyList_New(0);
    if (records == NULL) goto fail;
    Py_ssize_t pos = at;
    int64_t offset = first;
    while (pos < end) {
        Py_ssize_t start = pos;
        int64_t got, timestamp, crc;
        PyObject *key = NULL, *value = NULL;
        if (read_long(d, end, &pos, &got) < 0 || got != offset) goto not_whole;
        if (read_long(d, end, &pos, &timestamp) < 0) goto not_whole;
        int rc = read_optional(d, end, &pos, &key);
        if (rc) { if (rc < 0) goto fail; goto not_whole; }
        rc = read_optional(d, end, &pos, &value);
        if (rc) { Py_DECREF(key); if (rc < 0) goto fail; goto not_whole; }
        if (pos >= end || d[pos] != 0) { Py_DECREF(key); Py_DECREF(value); goto not_whole; }
        pos += 1;
        uLong sum = crc32(0L, d + start, (uInt)(pos - start));
        if (read_long(d, end, &pos, &crc) < 0 || (int64_t)sum != crc) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto not_whole;
        }
        /* new_record takes the references to key and value */
        Py_INCREF(empty_tuple);
        PyObject *record = new_record(topic, partition, offset, key, value, timestamp, empty_tuple);
        if (record == NULL) goto fail;
        rc = PyList_Append(records, record);
        Py_DECREF(record);
        if (rc < 0) goto fail;
        offset += 1;
    }
    if (pos != end || PyList_GET_SIZE(records) != count) goto not_whole;
    if (count && has_limit && offset > limit) goto not_whole;
    PyBuffer_Release(&buf);
    return records;
not_whole:
    Py_XDECREF(records);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(records);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ---- leaving acyclic objects out of the collector's walks ---------------------------- */

/* Whether `value` can be part of no reference cycle, so that an immutable object holding it
 * need not be walked by the garbage collector: a value of a type the collector does not track
 * (str, int, bytes, float, None, bool), or a tuple or an instance of an immutable class whose
 * items are all such values, recursively (these are left out of the collector's walks on the
 * way, as CPython does for tuples of atomic values at its next collection). Nothing else: a
 * list or a dict can change and join a cycle later. -1 on an error. */
static int settled(PyObject *value, int depth) {
    if (!PyObject_IS_GC(value)) return 1;
    if (!PyObject_GC_IsTracked(value)) {
        /* Untracked tuples, records and immutable instances hold only settled values; a list
         * or a dict untracked now may be tracked later. */
        if (PyTuple_CheckExact(value)) return 1;
        if (immutable_types == NULL) return 0;
        return PySet_Contains(immutable_types, (PyObject *)Py_TYPE(value));
    }
    if (depth > 8) return 0;
    if (PyTuple_CheckExact(value)) {
        Py_ssize_t n = PyTuple_GET_SIZE(value);
        for (Py_ssize_t i = 0; i < n; i++) {
            int ok = settled(PyTuple_GET_ITEM(value, i), depth + 1);
            if (ok != 1) return ok;
        }
        PyObject_GC_UnTrack(value);
        return 1;
    }
    if (immutable_types == NULL) return 0;
    PyTypeObject *type = Py_TYPE(value);
    int immutable = PySet_Contains(immutable_types, (PyObject *)type);
    if (immutable != 1) return immutable;
    if (PyDict_Check(value)) {
        /* An immutable mapping (a dict subclass that refuses changes): CPython tracks a dict
         * again when a value that may be tracked is put in it, however it is put there. */
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            int ok = settled(key, depth + 1);
            if (ok == 1) ok = settled(item, depth + 1);
            if (ok != 1) return ok;
        }
    }
    for (PyMemberDef *member = type->tp_members; member != NULL && member->name != NULL;
         member++) {
        PyObject *slot = *(PyObject **)((char *)value + member->offset);
        if (slot == NULL) {
            if (PyDict_Check(value)) continue; /* a mapping's cache not filled yet */
            return 0;                          /* a field not yet set: not made whole */
        }
        int ok = settled(slot, depth + 1);
        if (ok != 1) return ok;
    }
    PyObject_GC_UnTrack(value);
    return 1;
}

/* Register `cls` as immutable (checked: based on object, or on dict for a mapping, no
 * __dict__, every member a plain object slot; the caller vouches that its instances are not
 * changed once made). */
static int add_immutable(PyTypeObject *type) {
    /* Its bases hold nothing of their own (object, or Generic), or it is a dict's. */
    PyTypeObject *base = type->tp_base;
    int plain_base = base == &PyDict_Type ||
                     (base != NULL && base->tp_basicsize == PyBaseObject_Type.tp_basicsize &&
                      base->tp_dictoffset == 0 && base->tp_weaklistoffset == 0 &&
                      !PyType_IsSubtype(base, &PyDict_Type));
    if (!plain_base || type->tp_dictoffset != 0 ||
        type->tp_weaklistoffset != 0 || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_Format(PyExc_TypeError,
                     "%.100s: not a slots class on a plain base, without __dict__ or __weakref__",
                     type->tp_name);
        return -1;
    }
    for (PyMemberDef *member = type->tp_members; member != NULL && member->name != NULL;
         member++) {
        if (member->type != T_OBJECT_EX || member->flags & READONLY) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a plain object slot",
                         type->tp_name, member->name);
            return -1;
        }
    }
    if (immutable_types == NULL) {
        immutable_types = PySet_New(NULL);
        if (immutable_types == NULL) return -1;
    }
    return PySet_Add(immutable_types, (PyObject *)type);
}

static PyObject *immutable(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "immutable() takes a class");
        return NULL;
    }
    if (add_immutable((PyTypeObject *)cls) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *settle(PyObject *self, PyObject *value) {
    int ok = settled(value, 0);
    if (ok < 0) return NULL;
    return PyBool_FromLong(ok);
}

/* ---- constructors of frozen dataclasses with slots ---------------------------------- */

typedef struct {
    PyTypeObject *type;
    Py_ssize_t n;
    int immutable; /* registered: an instance of only settled fields is not tracked */
    Py_ssize_t offsets[];
} Layout;

static void drop_layout(PyObject *capsule) {
    Layout *layout = PyCapsule_GetPointer(capsule, NULL);
    if (layout != NULL) {
        Py_DECREF(layout->type);
        PyMem_Free(layout);
    }
}

static PyObject *construct(PyObject *capsule, PyObject *const *args, Py_ssize_t nargs) {
    Layout *layout = PyCapsule_GetPointer(capsule, NULL);
    if (layout == NULL) return NULL;
    if (nargs != layout->n) {
        PyErr_Format(PyExc_TypeError, "%.100s takes %zd fields, positional, got %zd",
                     layout->type->tp_name, layout->n, nargs);
        return NULL;
    }
    PyObject *made = layout->type->tp_alloc(layout->type, 0);
    if (made == NULL) return NULL;
    int all_settled = layout->immutable;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        *(PyObject **)((char *)made + layout->offsets[i]) = args[i];
        if (all_settled) {
            all_settled = settled(args[i], 1);
            if (all_settled < 0) {
                Py_DECREF(made);
                return NULL;
            }
        }
    }
    /* Immutable and holding only settled values: part of no reference cycle, ever (an
     * origin, a decoded event, a message: thousands alive in a batch, which the collector
     * would otherwise walk at each of its collections). */
    if (all_settled && PyObject_GC_IsTracked(made)) PyObject_GC_UnTrack(made);
    return made;
}

static PyMethodDef construct_def = {
    "construct", (PyCFunction)(void (*)(void))construct, METH_FASTCALL,
    "cls(*fields), its slots filled directly."};

/* The offset of slot `name` of `type`: a plain object slot, or -1 with an exception set. */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *descr = PyDict_GetItemWithError(type->tp_dict, name);
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%.100s.%U is not a slot", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || member->flags & READONLY) {
        PyErr_Format(PyExc_TypeError, "%.100s.%U is not a plain object slot", type->tp_name,
                     name);
        return -1;
    }
    return member->offset;
}

static PyObject *constructor(PyObject *self, PyObject *args) {
    PyTypeObject *type;
    PyObject *names;
    int frozen = 0;
    if (!PyArg_ParseTuple(args, "O!O!|p:constructor", &PyType_Type, &type, &PyTuple_Type,
                          &names, &frozen))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (type->tp_dictoffset != 0) {
        PyErr_Format(PyExc_TypeError, "%.100s has a __dict__: not a slots class", type->tp_name);
        return NULL;
    }
    Layout *layout = PyMem_Malloc(sizeof(Layout) + (size_t)n * sizeof(Py_ssize_t));
    if (layout == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        layout->offsets[i] = slot_offset(type, PyTuple_GET_ITEM(names, i));
        if (layout->offsets[i] < 0) {
            PyMem_Free(layout);
            return NULL;
        }
    }
    layout->n = n;
    /* Only a class whose every slot is a field made here can be registered immutable. */
    layout->immutable = 0;
    if (frozen) {
        Py_ssize_t members = 0;
        for (PyMemberDef *m = type->tp_members; m != NULL && m->name != NULL; m++) members++;
        if (members == n && add_immutable(type) == 0) {
            layout->immutable = 1;
        } else {
            PyErr_Clear();
        }
    }
    Py_INCREF(type);
    layout->type = type;
    PyObject *capsule = PyCapsule_New(layout, NULL, drop_layout);
    if (capsule == NULL) {
        Py_DECREF(type);
        PyMem_Free(layout);
        return NULL;
    }
    PyObject *function = PyCFunction_New(&construct_def, capsule);
    Py_DECREF(capsule);
    return function;
}

static PyObject *make_records(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"topic", "partition", "first", "rows", NULL};
    PyObject *topic, *partition, *rows;
    long long first;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO!LO:make_records", names, &topic,
                                     &PyLong_Type, &partition, &first, &rows))
        return NULL;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "streams._framing.bind(Record) was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(rows, "rows must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            PyErr_SetString(PyExc_TypeError, "a row is a (key, value, headers, timestamp_ms) tuple");
            goto fail;
        }
        PyObject *key = PyTuple_GET_ITEM(row, 0), *value = PyTuple_GET_ITEM(row, 1);
        PyObject *headers = PyTuple_GET_ITEM(row, 2);
        long long timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 3));
        if (timestamp == -1 && PyErr_Occurred()) goto fail;
        if (PyTuple_Check(headers) && PyTuple_GET_SIZE(headers) == 0) headers = empty_tuple;
        Py_INCREF(key);
        Py_INCREF(value);
        Py_INCREF(headers);
        PyObject *record = new_record(topic, partition, first + i, key, value, timestamp, headers);
        if (record == NULL) goto fail;
        PyList_SET_ITEM(out, i, record);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* An append's block and records in one pass over its rows: what `make_records` then
 * `encode_block` give (a test checks both ways), without reading each field back from the
 * record just made. The rows are columns: (keys, values, headers, timestamps), four lists of
 * one length (what the producer's queue holds: no object a record but its fields). */
static PyObject *frame_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"topic", "partition", "first", "rows", "sync", NULL};
    PyObject *topic, *partition, *rows;
    long long first;
    Py_buffer sync;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO!LOy*:frame_rows", names, &topic,
                                     &PyLong_Type, &partition, &first, &rows, &sync))
        return NULL;
    if (record_type == NULL) {
        PyBuffer_Release(&sync);
        PyErr_SetString(PyExc_RuntimeError, "streams._framing.bind(Record) was not called");
        return NULL;
    }
    PyObject *column[4];
    Py_ssize_t n = -1;
    if (PyTuple_Check(rows) && PyTuple_GET_SIZE(rows) == 4) {
        for (int c = 0; c < 4; c++) {
            column[c] = PyTuple_GET_ITEM(rows, c);
            if (!PyList_Check(column[c]) || (n >= 0 && PyList_GET_SIZE(column[c]) != n)) {
                n = -1;
                break;
            }
            n = PyList_GET_SIZE(column[c]);
        }
    }
    if (n < 0) {
        PyBuffer_Release(&sync);
        PyErr_SetString(PyExc_TypeError,
                        "rows are (keys, values, headers, timestamps): four lists of one length");
        return NULL;
    }
    Buffer body = {NULL, 0, 0};
    PyObject *records = PyList_New(n), *block = NULL, *out = NULL;
    if (records == NULL) goto done;
    /* Room for every row's fixed part and its bytes: one allocation in the common case. */
    Py_ssize_t room = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int f = 0; f < 2; f++) {
            PyObject *field = PyList_GET_ITEM(column[f], i);
            if (PyBytes_Check(field)) room += PyBytes_GET_SIZE(field);
        }
        room += 64;
    }
    if (buf_reserve(&body, room) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(column[0], i), *value = PyList_GET_ITEM(column[1], i);
        PyObject *headers = PyList_GET_ITEM(column[2], i);
        long long timestamp = PyLong_AsLongLong(PyList_GET_ITEM(column[3], i));
        if (timestamp == -1 && PyErr_Occurred()) goto done;
        if (buf_reserve(&body, 20) < 0) goto done;
        Py_ssize_t start = body.size;
        put_long(&body, (int64_t)(first + i));
        put_long(&body, (int64_t)timestamp);
        if (put_optional(&body, key, "key") < 0) goto done;
        if (put_optional(&body, value, "value") < 0) goto done;
        int has = PyObject_IsTrue(headers);
        if (has < 0) goto done;
        if (has) {
            if (put_headers(&body, headers) < 0) goto done;
        } else {
            if (buf_reserve(&body, 1) < 0) goto done;
            body.data[body.size++] = 0;
        }
        uLong crc = crc32(0L, body.data + start, (uInt)(body.size - start));
        if (buf_reserve(&body, 10) < 0) goto done;
        put_long(&body, (int64_t)crc);
        if (PyTuple_Check(headers) && PyTuple_GET_SIZE(headers) == 0) headers = empty_tuple;
        PyObject *record = record_type->tp_alloc(record_type, 0);
        PyObject *offset = PyLong_FromLongLong(first + i);
        if (record == NULL || offset == NULL) {
            Py_XDECREF(record);
            Py_XDECREF(offset);
            goto done;
        }
        /* The row's own timestamp (an int already): one object fewer a record. */
        PyObject *stamp = PyList_GET_ITEM(column[3], i);
        if (!PyLong_CheckExact(stamp)) {
            stamp = PyLong_FromLongLong(timestamp);
            if (stamp == NULL) {
                Py_DECREF(record);
                Py_DECREF(offset);
                goto done;
            }
        } else {
            Py_INCREF(stamp);
        }
        PyObject *fields[N_FIELDS] = {topic, partition, offset, key, value, stamp, headers};
        Py_INCREF(topic);
        Py_INCREF(partition);
        Py_INCREF(key);
        Py_INCREF(value);
        Py_INCREF(headers);
        for (int f = 0; f < N_FIELDS; f++) {
            *(PyObject **)((char *)record + slot_offsets[f]) = fields[f];
        }
        if (headers == empty_tuple && PyObject_GC_IsTracked(record)) PyObject_GC_UnTrack(record);
        PyList_SET_ITEM(records, i, record);
    }
    {
        unsigned char head[20];
        Buffer h = {head, 0, sizeof head};
        put_long(&h, n);
        put_long(&h, body.size);
        block = PyBytes_FromStringAndSize(NULL, h.size + body.size + sync.len);
        if (block == NULL) goto done;
        char *to = PyBytes_AS_STRING(block);
        memcpy(to, head, (size_t)h.size);
        if (body.size) memcpy(to + h.size, body.data, (size_t)body.size);
        memcpy(to + h.size + body.size, sync.buf, (size_t)sync.len);
    }
    out = PyTuple_Pack(2, block, records);
done:
    Py_XDECREF(block);
    Py_XDECREF(records);
    PyMem_Free(body.data);
    PyBuffer_Release(&sync);
    return out;
}

/* Kafka's murmur2 (the Java client's `Utils.murmur2`), as `streams.partitioner.murmur2`. */
static int32_t murmur2(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[whole + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[whole + 1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)data[whole]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *partition_for(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "partition_for(key: bytes, partitions: int)");
        return NULL;
    }
    long partitions = PyLong_AsLong(args[1]);
    if (partitions == -1 && PyErr_Occurred()) return NULL;
    if (partitions <= 0) {
        PyErr_Format(PyExc_ValueError, "a topic has at least one partition, not %ld", partitions);
        return NULL;
    }
    int32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(args[0]),
                        PyBytes_GET_SIZE(args[0]));
    return PyLong_FromLong((long)((uint32_t)h & 0x7fffffffu) % partitions);
}

/* ---- the embedded producer's queue -------------------------------------------------- */

/* `streams.produce_queue.RecordQueue` in C (the base of `EmbeddedProducer`): `produce` places
 * each record on its partition (murmur2) and adds its fields to that partition's columns,
 * without a Python frame;
 * the produce order is kept as one 32-bit slot number a record. A subclass gives `_route`. */
typedef struct {
    PyObject_HEAD
    PyObject *routes;  /* topic -> (slot of its partition 0, a list of rows per partition) */
    PyObject *touched; /* slots holding rows, in the order first produced to */
    uint32_t *order;   /* each queued record's slot, in produce order */
    Py_ssize_t n, cap;
} QueueObject;

static PyObject *s_route, *array_type;
static PyObject *s_kw[5]; /* produce's parameter names */

static int queue_init(QueueObject *self, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "RecordQueue() takes no arguments");
        return -1;
    }
    Py_XSETREF(self->routes, PyDict_New());
    Py_XSETREF(self->touched, PyList_New(0));
    if (self->routes == NULL || self->touched == NULL) return -1;
    self->n = 0;
    return 0;
}

static int queue_traverse(QueueObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->routes);
    Py_VISIT(self->touched);
    return 0;
}

static int queue_clear(QueueObject *self) {
    Py_CLEAR(self->routes);
    Py_CLEAR(self->touched);
    return 0;
}

static void queue_dealloc(QueueObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    queue_clear(self);
    PyMem_Free(self->order);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *queue_produce(QueueObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    PyObject *given[5] = {NULL, NULL, Py_None, empty_tuple, Py_None};
    if (nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "produce() takes at most 5 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) given[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int f = 0; f < 5 && found < 0; f++)
            if (name == s_kw[f] || PyUnicode_Compare(name, s_kw[f]) == 0) found = f;
        if (found < 0 || found < nargs) {
            PyErr_Format(PyExc_TypeError, "produce() got an unexpected or repeated argument %R",
                         name);
            return NULL;
        }
        given[found] = args[nargs + k];
    }
    PyObject *topic = given[0], *value = given[1], *key = given[2], *headers = given[3];
    PyObject *stamp = given[4];
    if (topic == NULL || value == NULL) {
        PyErr_SetString(PyExc_TypeError, "produce() needs a topic and a value");
        return NULL;
    }
    if (self->routes == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordQueue.__init__ was not called");
        return NULL;
    }
    PyObject *route = PyDict_GetItemWithError(self->routes, topic);
    if (route == NULL) {
        if (PyErr_Occurred()) return NULL;
        route = PyObject_CallMethodOneArg((PyObject *)self, s_route, topic);
        if (route == NULL) return NULL;
        int rc = PyDict_SetItem(self->routes, topic, route);
        Py_DECREF(route); /* the dict holds it */
        if (rc < 0) return NULL;
    }
    if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != 2 ||
        !PyList_Check(PyTuple_GET_ITEM(route, 1)) ||
        PyList_GET_SIZE(PyTuple_GET_ITEM(route, 1)) == 0) {
        PyErr_SetString(PyExc_TypeError, "_route() gives (slot, the rows of each partition)");
        return NULL;
    }
    long slot = PyLong_AsLong(PyTuple_GET_ITEM(route, 0));
    if (slot == -1 && PyErr_Occurred()) return NULL;
    PyObject *queues = PyTuple_GET_ITEM(route, 1);
    Py_ssize_t number = 0;
    if (key != Py_None) {
        if (!PyBytes_Check(key)) {
            PyErr_Format(PyExc_TypeError, "a record's key must be bytes or None, not %.100s",
                         Py_TYPE(key)->tp_name);
            return NULL;
        }
        int32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        number = (Py_ssize_t)(((uint32_t)h & 0x7fffffffu) % (uint32_t)PyList_GET_SIZE(queues));
    }
    PyObject *rows = PyList_GET_ITEM(queues, number);
    if (!PyTuple_Check(rows) || PyTuple_GET_SIZE(rows) != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "a partition's rows are (keys, values, headers, timestamps): four lists");
        return NULL;
    }
    PyObject *column[4];
    for (int c = 0; c < 4; c++) {
        column[c] = PyTuple_GET_ITEM(rows, c);
        if (!PyList_Check(column[c])) {
            PyErr_SetString(PyExc_TypeError,
                            "a partition's rows are (keys, values, headers, timestamps): four lists");
            return NULL;
        }
    }
    slot += (long)number;
    if (slot < 0 || slot > (long)UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a queue's slot is a 32-bit number");
        return NULL;
    }
    PyObject *ts;
    if (stamp == Py_None) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        ts = PyLong_FromLongLong((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    } else {
        ts = stamp;
        Py_INCREF(ts);
    }
    if (ts == NULL) return NULL;
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 1024;
        uint32_t *order = PyMem_Realloc(self->order, (size_t)cap * sizeof(uint32_t));
        if (order == NULL) {
            Py_DECREF(ts);
            return PyErr_NoMemory();
        }
        self->order = order;
        self->cap = cap;
    }
    if (PyList_GET_SIZE(column[0]) == 0) {
        PyObject *number_of_slot = PyLong_FromLong(slot);
        if (number_of_slot == NULL || PyList_Append(self->touched, number_of_slot) < 0) {
            Py_XDECREF(number_of_slot);
            Py_DECREF(ts);
            return NULL;
        }
        Py_DECREF(number_of_slot);
    }
    /* Columns of the fields themselves: no object a record (a tuple would be one more to
     * allocate, keep and free). A failed append leaves the columns of one length. */
    PyObject *fields[4] = {key, value, headers, ts};
    for (int c = 0; c < 4; c++) {
        if (PyList_Append(column[c], fields[c]) < 0) {
            for (int d = 0; d < c; d++) {
                Py_ssize_t size = PyList_GET_SIZE(column[d]);
                PyList_SetSlice(column[d], size - 1, size, NULL);
            }
            Py_DECREF(ts);
            return NULL;
        }
    }
    Py_DECREF(ts);
    self->order[self->n++] = (uint32_t)slot;
    Py_RETURN_NONE;
}

static PyObject *queue_take(QueueObject *self, PyObject *unused) {
    if (self->touched == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordQueue.__init__ was not called");
        return NULL;
    }
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) return NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)self->order,
                                              self->n * (Py_ssize_t)sizeof(uint32_t));
    if (raw == NULL) { Py_DECREF(fresh); return NULL; }
    PyObject *order = PyObject_CallFunction(array_type, "sO", "I", raw);
    Py_DECREF(raw);
    if (order == NULL) { Py_DECREF(fresh); return NULL; }
    PyObject *touched = self->touched;
    self->touched = fresh;
    self->n = 0;
    PyObject *out = PyTuple_Pack(2, touched, order);
    Py_DECREF(touched);
    Py_DECREF(order);
    return out;
}

static PyObject *queue_queued(QueueObject *self, PyObject *unused) {
    return PyLong_FromSsize_t(self->n);
}

static PyMethodDef queue_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))queue_produce, METH_FASTCALL | METH_KEYWORDS,
     "produce(topic, value, key=None, headers=(), timestamp_ms=None): queue a record on "
     "its partition."},
    {"take", (PyCFunction)queue_take, METH_NOARGS,
     "take() -> (touched slots, array('I') of slots in produce order); the queue starts anew "
     "(the rows stay in the lists `_route` gave, for the caller to take)."},
    {"queued", (PyCFunction)queue_queued, METH_NOARGS, "queued() -> records queued."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot queue_slots[] = {
    {Py_tp_doc, "An embedded producer's queue: rows by partition, and their produce order."},
    {Py_tp_init, queue_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, queue_dealloc},
    {Py_tp_traverse, queue_traverse},
    {Py_tp_clear, queue_clear},
    {Py_tp_methods, queue_methods},
    {0, NULL},
};

static PyType_Spec queue_spec = {
    "streams._framing.RecordQueue", sizeof(QueueObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, queue_slots,
};

/* ---- Kafka ------------------------------------------------------------------------ */

static PyObject *s_error, *s_headers, *s_topic, *s_partition, *s_offset, *s_key, *s_value,
    *s_timestamp;

static PyObject *kafka_records(PyObject *self, PyObject *messages) {
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "streams._framing.bind(Record) was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *got = PyObject_CallMethodNoArgs(message, s_error);
        if (got == NULL) goto fail;
        int plain = got == Py_None;
        Py_DECREF(got);
        if (!plain) goto other;
        got = PyObject_CallMethodNoArgs(message, s_headers);
        if (got == NULL) goto fail;
        plain = got == Py_None;
        Py_DECREF(got);
        if (!plain) goto other;
        PyObject *fields[N_FIELDS] = {NULL};
        PyObject *names[6] = {s_topic, s_partition, s_offset, s_key, s_value, s_timestamp};
        for (int f = 0; f < 6; f++) {
            fields[f] = PyObject_CallMethodNoArgs(message, names[f]);
            if (fields[f] == NULL) {
                for (int g = 0; g < f; g++) Py_DECREF(fields[g]);
                goto fail;
            }
        }
        /* timestamp() is (type, milliseconds) */
        PyObject *stamp = fields[5];
        if (!PyTuple_Check(stamp) || PyTuple_GET_SIZE(stamp) != 2) {
            for (int g = 0; g < 6; g++) Py_DECREF(fields[g]);
            PyErr_SetString(PyExc_TypeError, "a message's timestamp() is not a pair");
            goto fail;
        }
        fields[5] = PyTuple_GET_ITEM(stamp, 1);
        Py_INCREF(fields[5]);
        Py_DECREF(stamp);
        fields[6] = empty_tuple;
        Py_INCREF(empty_tuple);
        PyObject *record = record_type->tp_alloc(record_type, 0);
        if (record == NULL) {
            for (int g = 0; g < N_FIELDS; g++) Py_DECREF(fields[g]);
            goto fail;
        }
        for (int g = 0; g < N_FIELDS; g++) {
            *(PyObject **)((char *)record + slot_offsets[g]) = fields[g];
        }
        PyList_SET_ITEM(out, i, record);
    }
    Py_DECREF(seq);
    return out;
other: /* an error or headers: the caller's Python loop takes the whole poll */
    Py_DECREF(out);
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* ---- set-up ------------------------------------------------------------------------ */

static PyObject *bind(PyObject *self, PyObject *cls) {
    /* The Record class whose slots `whole_records` fills. */
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the Record class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, FIELDS[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "Record.%s is not a slot", FIELDS[i]);
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || member->flags & READONLY) {
            PyErr_Format(PyExc_TypeError, "Record.%s is not a plain object slot", FIELDS[i]);
            return NULL;
        }
        slot_offsets[i] = member->offset;
    }
    if (type->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "Record must have no __dict__");
        return NULL;
    }
    if (add_immutable(type) < 0) return NULL;
    Py_INCREF(cls);
    Py_XSETREF(record_type, type);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "Bind the Record class whose slots decoded records fill."},
    {"encode_block", (PyCFunction)(void (*)(void))encode_block, METH_VARARGS | METH_KEYWORDS,
     "encode_block(records, sync) -> bytes: one container block (checked format)."},
    {"constructor", constructor, METH_VARARGS,
     "constructor(cls, field_names, frozen=False) -> a function making cls(*fields), slots "
     "filled directly (frozen: instances of only settled fields left out of the collector)."},
    {"immutable", immutable, METH_O,
     "immutable(cls): instances of cls are never changed once made (a frozen slots class)."},
    {"settle", settle, METH_O,
     "settle(value) -> bool: whether value can be part of no reference cycle (tuples and "
     "immutable instances of such values are left out of the collector's walks)."},
    {"make_records", (PyCFunction)(void (*)(void))make_records, METH_VARARGS | METH_KEYWORDS,
     "make_records(topic, partition, first, rows) -> list[Record]: offsets from `first`."},
    {"frame_rows", (PyCFunction)(void (*)(void))frame_rows, METH_VARARGS | METH_KEYWORDS,
     "frame_rows(topic, partition, first, rows, sync) -> (block, records): an append's "
     "block and its records (encode_block of make_records); rows are (keys, values, headers, "
     "timestamps)."},
    {"partition_for", (PyCFunction)(void (*)(void))partition_for, METH_FASTCALL,
     "partition_for(key, partitions) -> int: Kafka's murmur2 partitioner."},
    {"kafka_records", kafka_records, METH_O,
     "kafka_records(messages) -> list[Record] | None (None: a message with an error or headers)."},
    {"whole_records", (PyCFunction)(void (*)(void))whole_records, METH_VARARGS | METH_KEYWORDS,
     "whole_records(data, at, end, first, limit, count, topic, partition) -> list | None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "streams._framing",
    "The embedded log's per-record framing in C (streams.segment falls back to Python).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__framing(void) {
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL) return NULL;
    PyObject **names[] = {&s_error, &s_headers, &s_topic, &s_partition, &s_offset, &s_key,
                          &s_value, &s_timestamp};
    const char *texts[] = {"error", "headers", "topic", "partition", "offset", "key", "value",
                           "timestamp"};
    for (int i = 0; i < 8; i++) {
        *names[i] = PyUnicode_InternFromString(texts[i]);
        if (*names[i] == NULL) return NULL;
    }
    s_route = PyUnicode_InternFromString("_route");
    if (s_route == NULL) return NULL;
    const char *kw[] = {"topic", "value", "key", "headers", "timestamp_ms"};
    for (int i = 0; i < 5; i++) {
        s_kw[i] = PyUnicode_InternFromString(kw[i]);
        if (s_kw[i] == NULL) return NULL;
    }
    PyObject *array_module = PyImport_ImportModule("array");
    if (array_module == NULL) return NULL;
    array_type = PyObject_GetAttrString(array_module, "array");
    Py_DECREF(array_module);
    if (array_type == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *queue_type = PyType_FromSpec(&queue_spec);
    if (queue_type == NULL || PyModule_AddObject(m, "RecordQueue", queue_type) < 0) {
        Py_XDECREF(queue_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
