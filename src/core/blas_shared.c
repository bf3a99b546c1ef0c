/* Built into libttt.so only (CMakeLists.txt): when a host program (Python, a C program) loads
 * the library, OpenBLAS has already chosen its kernels, so a generic core on a better CPU can
 * only be reported, once, with the variable to set before the host starts (blas.h;
 * docs/benchmarks.md "OpenBLAS kernels"). */
#include "blas.h"

__attribute__((constructor)) static void ttt_blas_check_on_load(void) {
    ttt_blas_warn_core();
}
