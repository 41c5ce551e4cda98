import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The journal index's table behaves as the dictionary it replaces, in the memory it claims.
struct RecordTableTests {
    private static func identifier(_ random: inout SeededGenerator) -> UUID {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255, using: &random) }
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }

    @Test(arguments: [8, 300, 5_000])
    func randomAddsChangesAndRemovalsLeaveWhatADictionaryWouldHold(keyCount: Int) {
        // Given a table and a dictionary, and a pool of identifiers small enough that the same
        // ones are added, changed and removed again and again (long probe runs, removals that
        // shift runs back, runs that wrap around the end of the table)
        var random = SeededGenerator(seed: UInt64(keyCount))
        let pool = (0..<keyCount).map { _ in Self.identifier(&random) }
        var table = RecordTable<Int>()
        var reference: [UUID: Int] = [:]

        // When both take the same 40,000 random changes
        for step in 0..<40_000 {
            let key = pool[Int.random(in: 0..<pool.count, using: &random)]
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                #expect(table.updateValue(step, forKey: key) == reference.updateValue(step, forKey: key))
            case 5..<9:
                #expect(table.removeValue(forKey: key) == reference.removeValue(forKey: key))
            default:
                table[key] = nil
                reference[key] = nil
            }
            // Then after each, they hold as many values, and the same value for a random key
            let probe = pool[Int.random(in: 0..<pool.count, using: &random)]
            #expect(table.count == reference.count && table[probe] == reference[probe], "step \(step)")
        }
        // And every key reads the same and iteration visits each value once
        for key in pool { #expect(table[key] == reference[key]) }
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == reference)
        #expect(Set(table.keys) == Set(reference.keys) && table.isEmpty == reference.isEmpty)
    }

    @Test func aTableThatGrowsOneAddAtATimeKeepsEveryValue() {
        // Given an empty table, When 100,000 identifiers are added one at a time (it grows by
        // half again each time it is 80 % full), and every other one removed
        var random = SeededGenerator(seed: 99)
        let keys = (0..<100_000).map { _ in Self.identifier(&random) }
        var table = RecordTable<Int>()
        for (index, key) in keys.enumerated() { table[key] = index }
        for (index, key) in keys.enumerated() where index.isMultiple(of: 2) { table[key] = nil }
        // Then the others are all there, and only they
        #expect(table.count == 50_000)
        #expect(keys.indices.allSatisfy { table[keys[$0]] == ($0.isMultiple(of: 2) ? nil : $0) })
    }

    @Test func theHashOfAnIdentifierDependsOnItsWholeValue() {
        // Given identifiers that differ in one bit, anywhere among their 128
        let base = UUID(uuidString: "00000000-0000-4000-8000-000000000000")!
        var hashes = Set<UInt64>()
        for bit in 0..<128 {
            var bytes = base.uuid
            withUnsafeMutableBytes(of: &bytes) { $0[bit / 8] ^= UInt8(1) << UInt8(bit % 8) }
            hashes.insert(RecordTable<Int>.hash(UUID(uuid: bytes)))
        }
        // Then each hashes apart (ids that share either half, as sequential or crafted ones
        // do, do not pile up in one run)
        #expect(hashes.count == 128)
    }

    @Test func anIndexEntryTakesThirtyTwoBytes() {
        // The index of a million records holds a million of these (see `JournalIndex`).
        #expect(MemoryLayout<JournalIndex.StoredEntry>.size == 32)
        #expect(MemoryLayout<JournalIndex.StoredEntry?>.size == 32)
    }

    @Test func aTableReservedLargerThanItsValuesNeedShrinksAndKeepsEveryValue() {
        // Given a table reserved for 100,000 values that holds 10,000
        var table = RecordTable<Int>()
        table.reserveCapacity(100_000)
        var expected: [UUID: Int] = [:]
        for value in 0..<10_000 {
            let id = UUID()
            table[id] = value
            expected[id] = value
        }
        let reservedSlots = table.slotCount

        // When it shrinks, and again
        table.shrinkIfSparse()
        let shrunkSlots = table.slotCount
        table.shrinkIfSparse()

        // Then it holds about the slots 10,000 values need (11,112 at most 90 % full; a shard
        // with at most a sixteenth more is left as it is), once, and every value is still found
        #expect(reservedSlots >= 111_112)
        #expect(shrunkSlots >= 11_112 && shrunkSlots <= 12_000 && table.slotCount == shrunkSlots)
        #expect(table.count == 10_000)
        for (id, value) in expected { #expect(table[id] == value) }
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == expected)
    }

    @Test func aTableGrowsOneShardAtATimeAndHoldsAtMostAnEighthMoreSlotsThanItNeeds() {
        // Given a table that grows one add at a time to 50,000 values
        var table = RecordTable<Int>()
        var largestGrowth = 0
        var previous = table.slotCount
        for value in 0..<50_000 {
            table[UUID()] = value
            let slots = table.slotCount
            largestGrowth = max(largestGrowth, slots - previous)
            previous = slots
            if value % 1_000 == 999 {
                // Then it never holds more than an eighth more slots than 90 % full needs
                // (and each shard's least, 8, and its rounding)
                let most = Double(value + 1) / RecordTable<Int>.maximumLoad * 1.125 + Double(RecordTable<Int>.shardCount * 10)
                #expect(Double(slots) <= most, "\(slots) slots for \(value + 1) values")
            }
        }
        // And growing never moved more than one shard: about a 64th of the slots, where a
        // whole table that grew would have added 15,000 at once
        #expect(largestGrowth > 0 && largestGrowth < 1_000)
        #expect(table.count == 50_000)
    }
}
