// Sorting a million records by where they lie
// ===========================================
//
// A restore sorts every pending record by its place in the journal before it reads them, so
// that the reads go forward through each segment. A comparison sort of a million 32-byte
// elements took about a twentieth of a restore; this least-significant-digit radix sort
// moves each element once for each 16-bit digit in which the keys differ (two or three
// digits for journal places), and is stable.

extension Array {
    /// Sorts the elements by `key`, ascending; elements with equal keys keep their order.
    ///
    /// - Complexity: O(*n* × *d*), where *d* is the number of 16-bit digits in which the
    ///   keys differ; a comparison sort below 512 elements.
    mutating func sortByKey(_ key: (Element) -> UInt64) {
        guard count >= 512 else {
            self = enumerated().sorted { (key($0.element), $0.offset) < (key($1.element), $1.offset) }.map(\.element)
            return
        }
        var keys = map(key)
        // The bits in which some keys differ.
        let varying = keys.reduce(0) { $0 | $1 } ^ keys.reduce(~0) { $0 & $1 }
        var elements = self
        var sortedKeys = keys
        var digitCounts = [Int](repeating: 0, count: 1 << 16 + 1)
        for shift in stride(from: 0, to: 64, by: 16) where (varying >> UInt64(shift)) & 0xFFFF != 0 {
            for index in digitCounts.indices { digitCounts[index] = 0 }
            keys.withUnsafeBufferPointer { keys in
                for key in keys { digitCounts[Int((key >> UInt64(shift)) & 0xFFFF) + 1] += 1 }
            }
            for digit in 1..<digitCounts.count { digitCounts[digit] += digitCounts[digit - 1] }
            self.withUnsafeBufferPointer { source in
                keys.withUnsafeBufferPointer { sourceKeys in
                    elements.withUnsafeMutableBufferPointer { target in
                        sortedKeys.withUnsafeMutableBufferPointer { targetKeys in
                            digitCounts.withUnsafeMutableBufferPointer { next in
                                for index in 0..<source.count {
                                    let digit = Int((sourceKeys[index] >> UInt64(shift)) & 0xFFFF)
                                    let position = next[digit]
                                    next[digit] = position + 1
                                    target[position] = source[index]
                                    targetKeys[position] = sourceKeys[index]
                                }
                            }
                        }
                    }
                }
            }
            swap(&self, &elements)
            swap(&keys, &sortedKeys)
        }
    }
}
