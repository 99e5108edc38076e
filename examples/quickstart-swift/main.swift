import LibSync

let counter = OSAtomicStorage<Int32>(0)             // memory with a stable address
let hits = OSAtomicIncrement32Barrier(counter)      // never `&someProperty`: it does not compile
print(hits)                                         // 1: returns the new value, as Apple's does
