/* Listing 4-1 of Apple's Threading Programming Guide ("Performing atomic operations"), as
 * written for macOS, unchanged but for the printing. Build against an installed libsync:
 *   cc listing_4_1.c $(pkg-config --cflags --libs sync)                                     */
#include <libkern/OSAtomic.h>
#include <stdio.h>

static int expect(const char *step, int32_t value, int32_t wanted) {
    printf("%-42s theValue = %4d (%s)\n", step, (int)value, value == wanted ? "as Apple says" : "WRONG");
    return value != wanted;
}

int main(void) {
    int failures = 0;
    int32_t theValue = 0;
    OSAtomicTestAndSet(0, &theValue);
    failures += expect("OSAtomicTestAndSet(0, &theValue)", theValue, 128);   /* now 128 */

    theValue = 0;
    OSAtomicTestAndSet(7, &theValue);
    failures += expect("OSAtomicTestAndSet(7, &theValue)", theValue, 1);     /* now 1 */

    theValue = 0;
    OSAtomicTestAndSet(15, &theValue);
    failures += expect("OSAtomicTestAndSet(15, &theValue)", theValue, 256);  /* now 256 */

    OSAtomicCompareAndSwap32(256, 512, &theValue);
    failures += expect("OSAtomicCompareAndSwap32(256, 512, &theValue)", theValue, 512);   /* now 512 */

    OSAtomicCompareAndSwap32(256, 1024, &theValue);
    failures += expect("OSAtomicCompareAndSwap32(256, 1024, &theValue)", theValue, 512);  /* still 512 */
    return failures;
}
