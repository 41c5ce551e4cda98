import Foundation
import Testing
import CrashHarness
@testable import PersistentOperations

@Suite("Radix sort")
struct RadixSortTests {
    /// Elements carry their original position, so that stability shows.
    struct Element: Equatable {
        var key: UInt64
        var position: Int
    }

    /// What a stable comparison sort gives.
    func reference(_ elements: [Element]) -> [Element] {
        elements.sorted { ($0.key, $0.position) < ($1.key, $1.position) }
    }

    @Test(arguments: [0, 1, 2, 511, 512, 513, 5_000, 70_000])
    func sortsByKeyStablyAsAComparisonSortDoes(count: Int) {
        // Given keys that repeat, and that differ in low, middle and high digits
        var generator = SeededGenerator(seed: UInt64(count) + 7)
        let shapes: [(inout SeededGenerator) -> UInt64] = [
            { UInt64.random(in: 0..<50, using: &$0) },
            { UInt64.random(in: 0..<4, using: &$0) << 40 | UInt64.random(in: 0..<100_000, using: &$0) },
            { UInt64.random(in: 0...UInt64.max, using: &$0) },
            { UInt64.random(in: 0..<3, using: &$0) << 62 },
        ]
        for (index, shape) in shapes.enumerated() {
            let elements = (0..<count).map { Element(key: shape(&generator), position: $0) }
            // When they are sorted by key
            var sorted = elements
            sorted.sortByKey(\.key)
            // Then the order is a stable sort's (compared whole, reported briefly)
            let isStableSortOrder = sorted == reference(elements)
            #expect(isStableSortOrder, "keys of shape \(index)")
        }
    }

    @Test func keysThatAreAllEqualKeepTheirOrder() {
        let elements = (0..<2_000).map { Element(key: 0xABCD_0000_1234, position: $0) }
        var sorted = elements
        sorted.sortByKey(\.key)
        let keptOrder = sorted == elements
        #expect(keptOrder)
    }
}
