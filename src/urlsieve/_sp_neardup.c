/*
 * _sp_neardup.c: near-duplicate documents (a unit of urlsieve._speedups; _speedups.c has the
 * table of contents): the SimHash of a text and the near-duplicate index's table walk, in
 * _neardup.h. Python references: urlsieve/neardup/simhash.py and neardup/index.py
 * (_Tables._lookup_py), held equal by tests/neardup/test_neardup_speedups.py.
 */
#include "_speedups.h"
#include "_neardup.h"

const PyMethodDef sp_neardup_methods[] = {
    NEARDUP_METHODS
    {NULL, NULL, 0, NULL},
};
