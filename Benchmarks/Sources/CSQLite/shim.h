// The system SQLite, a baseline of the store benchmarks (S1–S5) only: the libraries of the
// parent package never link it.
#include <sqlite3.h>
