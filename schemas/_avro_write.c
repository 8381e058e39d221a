/* The codec's Avro writer: one record of a schema compiled by `schemas.avro_program`.
 *
 * fastavro's writer walks the parsed schema at every record (a dict lookup and string
 * comparisons per field to find its type); this one walks a program made once from it:
 * nested (operation, argument) tuples. It writes only what it knows exactly how fastavro
 * writes, and is strict about Python types (an int for a long, a str for a string, a bool for
 * a boolean, a dict for a record with every field present, ...): anything else raises
 * ValueError (or OverflowError, or TypeError) and the codec asks fastavro, which then writes
 * the record or says why it cannot. So the bytes are fastavro's for every record
 * (tests/test_avro_program.py compares them on a run's events and on every Avro type used).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The operations (schemas/avro_program.py names the same numbers). */
enum {
    OP_BOOLEAN = 1,
    OP_LONG = 2,    /* int and long: the same zigzag varint */
    OP_DOUBLE = 3,
    OP_STRING = 4,
    OP_BYTES = 5,
    OP_ENUM = 6,    /* argument: {symbol: index} */
    OP_RECORD = 7,  /* argument: ((field name, program), ...) */
    OP_ARRAY = 8,   /* argument: the items' program */
    OP_MAP = 9,     /* argument: the values' program */
    OP_OPTIONAL = 10, /* ["null", T]; argument: T's program */
    OP_NAMED = 11,  /* a union of named types, written from (name, datum); {name: (index, program)} */
};

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buffer;

static int reserve(Buffer *out, Py_ssize_t extra) {
    if (out->len + extra <= out->cap) {
        return 0;
    }
    Py_ssize_t cap = out->cap ? out->cap : 512;
    while (cap < out->len + extra) {
        cap *= 2;
    }
    char *data = PyMem_Realloc(out->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->cap = cap;
    return 0;
}

static int put_raw(Buffer *out, const char *data, Py_ssize_t size) {
    if (reserve(out, size) < 0) {
        return -1;
    }
    memcpy(out->data + out->len, data, (size_t)size);
    out->len += size;
    return 0;
}

static int put_long(Buffer *out, long long value) {
    unsigned long long n = ((unsigned long long)value << 1) ^ (unsigned long long)(value >> 63);
    if (reserve(out, 10) < 0) {
        return -1;
    }
    while (n & ~0x7FULL) {
        out->data[out->len++] = (char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    out->data[out->len++] = (char)n;
    return 0;
}

static int unfit(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return -1;
}

static int put_text(Buffer *out, PyObject *datum) {
    if (!PyUnicode_CheckExact(datum)) {
        return unfit("not a str");
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(datum, &size);
    if (text == NULL) {
        return -1;
    }
    if (put_long(out, size) < 0) {
        return -1;
    }
    return put_raw(out, text, size);
}

static int write_datum(Buffer *out, PyObject *program, PyObject *datum);

static int write_op(Buffer *out, long op, PyObject *arg, PyObject *datum) {
    switch (op) {
    case OP_BOOLEAN:
        if (datum != Py_True && datum != Py_False) {
            return unfit("not a bool");
        }
        if (reserve(out, 1) < 0) {
            return -1;
        }
        out->data[out->len++] = datum == Py_True ? 1 : 0;
        return 0;
    case OP_LONG: {
        if (!PyLong_CheckExact(datum)) {
            return unfit("not an int");
        }
        long long value = PyLong_AsLongLong(datum);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        return put_long(out, value);
    }
    case OP_DOUBLE: {
        if (!PyFloat_CheckExact(datum) && !PyLong_CheckExact(datum)) {
            return unfit("not a float");
        }
        double value = PyFloat_AsDouble(datum);
        if (value == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        if (reserve(out, 8) < 0) {
            return -1;
        }
        if (PyFloat_Pack8(value, out->data + out->len, 1) < 0) {
            return -1;
        }
        out->len += 8;
        return 0;
    }
    case OP_STRING:
        return put_text(out, datum);
    case OP_BYTES:
        if (!PyBytes_CheckExact(datum)) {
            return unfit("not bytes");
        }
        if (put_long(out, PyBytes_GET_SIZE(datum)) < 0) {
            return -1;
        }
        return put_raw(out, PyBytes_AS_STRING(datum), PyBytes_GET_SIZE(datum));
    case OP_ENUM: {
        if (!PyUnicode_CheckExact(datum)) {
            return unfit("not an enum symbol");
        }
        PyObject *index = PyDict_GetItemWithError(arg, datum);
        if (index == NULL) {
            return PyErr_Occurred() ? -1 : unfit("not a symbol of the enum");
        }
        return put_long(out, PyLong_AsLongLong(index));
    }
    case OP_RECORD: {
        if (!PyDict_CheckExact(datum)) {
            return unfit("not a dict");
        }
        Py_ssize_t count = PyTuple_GET_SIZE(arg);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *field = PyTuple_GET_ITEM(arg, i);
            PyObject *value = PyDict_GetItemWithError(datum, PyTuple_GET_ITEM(field, 0));
            if (value == NULL) {
                return PyErr_Occurred() ? -1 : unfit("a field is missing");
            }
            if (write_datum(out, PyTuple_GET_ITEM(field, 1), value) < 0) {
                return -1;
            }
        }
        return 0;
    }
    case OP_ARRAY: {
        if (!PyList_CheckExact(datum) && !PyTuple_CheckExact(datum)) {
            return unfit("not a list");
        }
        PyObject *items = PySequence_Fast(datum, "not a list");
        if (items == NULL) {
            return -1;
        }
        Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
        int failed = 0;
        if (count > 0) {
            failed = put_long(out, count) < 0;
            for (Py_ssize_t i = 0; i < count && !failed; i++) {
                failed = write_datum(out, arg, PySequence_Fast_GET_ITEM(items, i)) < 0;
            }
        }
        Py_DECREF(items);
        return failed ? -1 : put_long(out, 0);
    }
    case OP_MAP: {
        if (!PyDict_CheckExact(datum)) {
            return unfit("not a dict");
        }
        Py_ssize_t count = PyDict_GET_SIZE(datum);
        if (count > 0) {
            if (put_long(out, count) < 0) {
                return -1;
            }
            Py_ssize_t position = 0;
            PyObject *key, *value;
            while (PyDict_Next(datum, &position, &key, &value)) {
                if (put_text(out, key) < 0 || write_datum(out, arg, value) < 0) {
                    return -1;
                }
            }
        }
        return put_long(out, 0);
    }
    case OP_OPTIONAL:
        if (datum == Py_None) {
            return put_long(out, 0);
        }
        if (PyTuple_Check(datum)) {
            return unfit("a union branch named");
        }
        if (put_long(out, 1) < 0) {
            return -1;
        }
        return write_datum(out, arg, datum);
    case OP_NAMED: {
        if (!PyTuple_CheckExact(datum) || PyTuple_GET_SIZE(datum) != 2) {
            return unfit("not a (name, datum) pair");
        }
        PyObject *branch = PyDict_GetItemWithError(arg, PyTuple_GET_ITEM(datum, 0));
        if (branch == NULL) {
            return PyErr_Occurred() ? -1 : unfit("no such branch");
        }
        if (put_long(out, PyLong_AsLongLong(PyTuple_GET_ITEM(branch, 0))) < 0) {
            return -1;
        }
        return write_datum(out, PyTuple_GET_ITEM(branch, 1), PyTuple_GET_ITEM(datum, 1));
    }
    default:
        PyErr_Format(PyExc_TypeError, "unknown operation %ld in an Avro program", op);
        return -1;
    }
}

static int write_datum(Buffer *out, PyObject *program, PyObject *datum) {
    if (!PyTuple_CheckExact(program) || PyTuple_GET_SIZE(program) != 2) {
        PyErr_SetString(PyExc_TypeError, "an Avro program node is an (operation, argument)");
        return -1;
    }
    long op = PyLong_AsLong(PyTuple_GET_ITEM(program, 0));
    if (op == -1 && PyErr_Occurred()) {
        return -1;
    }
    return write_op(out, op, PyTuple_GET_ITEM(program, 1), datum);
}

PyDoc_STRVAR(write_doc,
    "write(header: bytes, program: tuple, datum) -> bytes\n\n"
    "`header` then the Avro binary encoding of `datum` by `program`; ValueError (or\n"
    "OverflowError, TypeError) when `datum` is not exactly what the program writes.");

static PyObject *avro_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "write(header, program, datum) takes three arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "the header must be bytes");
        return NULL;
    }
    Buffer out = {NULL, 0, 0};
    PyObject *result = NULL;
    if (put_raw(&out, PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0])) == 0
        && write_datum(&out, args[1], args[2]) == 0) {
        result = PyBytes_FromStringAndSize(out.data, out.len);
    }
    PyMem_Free(out.data);
    return result;
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))avro_write, METH_FASTCALL, write_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "schemas._avro_write",
    "The codec's Avro writer of one record by a compiled program (schemas.avro_program).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__avro_write(void) {
    return PyModule_Create(&module);
}
