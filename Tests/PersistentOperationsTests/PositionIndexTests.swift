import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The queue's index of entry positions holds what a dictionary would, through adds, removals
/// (each shifting the slots after it back by the distance they keep) and growth.
struct PositionIndexTests {
    typealias PositionIndex = PersistentOperationQueue.PositionIndex

    @Test(arguments: [255, 2, 1])
    func randomAddsAndRemovalsLeaveWhatADictionaryWouldHold(farDistance: Int) {
        // Given a pool of UUIDs, each with a position of its own, and an index whose slots
        // keep their distances up to `farDistance` (beyond, worked out from the UUID)
        var random = SeededGenerator(seed: UInt64(farDistance))
        let pool = (0..<3_000).map { _ in UUIDBits(high: random.next(), low: random.next()) }
        let keys = PositionIndex.Keys(full: [], compact: pool)
        var index = PositionIndex(farDistance: farDistance)
        var reference: Set<Int> = []

        // When UUIDs are added and removed at random, the index growing as it fills
        var allFound = true
        for _ in 0..<40_000 {
            let member = Int.random(in: 0..<pool.count, using: &random)
            if Bool.random(using: &random) {
                let added = index.insert(~Int32(member), of: pool[member], keys: keys)
                allFound = allFound && added == reference.insert(member).inserted
            } else {
                let removed = index.remove(pool[member], keys: keys)
                allFound = allFound && removed == (reference.remove(member) != nil ? ~Int32(member) : nil)
            }
        }

        // Then every UUID is found at its position exactly when the dictionary holds it
        #expect(allFound)
        #expect(index.count == reference.count)
        let matches = pool.indices.allSatisfy { member in
            index.position(of: pool[member], keys: keys) == (reference.contains(member) ? ~Int32(member) : nil)
        }
        #expect(matches)
    }
}
