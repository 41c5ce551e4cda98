import CrashHarness
import Foundation
import Testing
@testable import PersistentOperations

/// The queue's table of entries behaves as the dictionary it replaces.
struct EntryTableTests {
    private func entry(_ index: Int) throws -> PersistentOperationQueue.Entry {
        PersistentOperationQueue.Entry(record: try makeRecord(index: index), operation: nil, attemptsInFlight: index)
    }

    @Test func theBookkeepingOfACopiedEntryChangesApartFromTheOriginal() throws {
        // Given an entry in the table with crash evidence and a run condition (kept in a box
        // that copies share)
        var table = PersistentOperationQueue.EntryTable()
        var original = try entry(1)
        original.crashes = 2
        original.parkedUnder = "wifi"
        table["a"] = original

        // When a copy read from the table changes them and is stored under another key
        var copy = try #require(table["a"])
        copy.crashes += 1
        copy.parkedUnder = nil
        copy.heldDependents = [BlockOperation()]
        table["b"] = copy
        table["a"]?.kills = 4

        // Then each entry holds only its own changes
        #expect(table["a"]?.crashes == 2 && table["a"]?.parkedUnder == "wifi" && table["a"]?.kills == 4)
        #expect(table["a"]?.heldDependents.isEmpty == true)
        #expect(table["b"]?.crashes == 3 && table["b"]?.parkedUnder == nil && table["b"]?.kills == 0)
        #expect(table["b"]?.heldDependents.count == 1)
        #expect(original.crashes == 2 && original.kills == 0)
    }

    private static func change(_ entry: inout PersistentOperationQueue.Entry?, _ body: (inout PersistentOperationQueue.Entry?) -> Void) {
        body(&entry)
    }

    @Test func randomAddsChangesAndRemovalsLeaveWhatADictionaryWouldHold() throws {
        var table = PersistentOperationQueue.EntryTable()
        var reference: [String: Int] = [:]
        var random = SeededGenerator(seed: 27)
        let ids = (0..<64).map { "ID-\($0)" }
        for step in 0..<5_000 {
            let id = ids[Int.random(in: 0..<ids.count, using: &random)]
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                // Add or replace
                var new = try entry(step % 50)
                new.kills = step
                let old = table.updateValue(new, forKey: id)
                #expect(old?.kills == reference[id])
                reference[id] = step
            case 1:
                // Remove
                #expect(table.removeValue(forKey: id)?.kills == reference.removeValue(forKey: id))
            case 2:
                // Change in place, through the subscript or withEntry
                if step % 2 == 0 {
                    table[id]?.kills += 1
                } else {
                    #expect((table.withEntry(id) { $0.kills += 1 } != nil) == (reference[id] != nil))
                }
                if reference[id] != nil { reference[id]! += 1 }
            case 3:
                // Set nil removes
                table[id] = nil
                reference[id] = nil
            case 4:
                // Through an inout access (the subscript's `_modify`): add or replace
                let new = try entry(step % 50)
                Self.change(&table[id]) { $0 = new; $0?.kills = step }
                reference[id] = step
            default:
                // Through an inout access: set nil removes, a missing entry stays missing
                Self.change(&table[id]) { $0 = nil }
                reference[id] = nil
            }
            #expect(table.count == reference.count)
        }
        // Every identifier finds its own entry, and iteration, keys and values agree
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value.kills) }) == reference)
        #expect(Set(table.keys) == Set(reference.keys) && table.keys.count == reference.count)
        #expect(table.values.map(\.kills).sorted() == reference.values.sorted())
        for id in ids { #expect(table[id]?.kills == reference[id]) }
        #expect(table.first.map { reference[$0.key] == $0.value.kills } ?? reference.isEmpty)
        #expect(table.isEmpty == reference.isEmpty)
    }

    @Test func randomChangesOfEntriesHeldByTheirUUIDsCompactOrWholeLeaveWhatADictionaryWouldHold() throws {
        // Identifiers in canonical form are found through the table's index of positions;
        // an entry with crash evidence (kills) is held whole, one without compact, and a
        // change moves it between the two (the last of each kind moving into its place); the
        // records are of three types, which compact entries hold as ordinals
        var table = PersistentOperationQueue.EntryTable()
        var reference: [String: Int] = [:]
        var random = SeededGenerator(seed: 91)
        let records = try (0..<500).map { index -> OperationRecord in
            var record = try makeRecord(index: index)
            record.id = RecordIdentifier.make()
            record.payload = Data()
            record.typeIdentifier = "com.example.type-\(index % 3)"
            return record
        }
        var sawBoth = false
        for step in 1...20_000 {
            let record = records[Int.random(in: 0..<records.count, using: &random)]
            let id = record.id
            switch Int.random(in: 0..<6, using: &random) {
            case 0, 1:
                // Add or replace, compact or whole
                var new = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0)
                new.kills = Bool.random(using: &random) ? 0 : step
                #expect(table.updateValue(new, forKey: id)?.kills == reference[id])
                reference[id] = new.kills
            case 2:
                #expect(table.removeValue(forKey: id)?.kills == reference.removeValue(forKey: id))
            case 3, 4:
                // Whole to compact and back, in place
                guard let kills = reference[id] else { continue }
                let changed = kills == 0 ? step : 0
                table[id]?.kills = changed
                reference[id] = changed
            default:
                table[id] = nil
                reference[id] = nil
            }
            #expect(table.count == reference.count)
            if table.compactCount > 50, table.count - table.compactCount > 50 { sawBoth = true }
        }
        #expect(sawBoth, "many entries of both kinds at once")
        for record in records { #expect(table[record.id]?.kills == reference[record.id]) }
        let typesMatch = records.allSatisfy { record in table[record.id].map { $0.record.typeIdentifier == record.typeIdentifier } ?? true }
        #expect(typesMatch)
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value.kills) }) == reference)
        // Emptied, it holds nothing, and takes them all again
        for record in records { table[record.id] = nil }
        #expect(table.isEmpty)
        for record in records { table[record.id] = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0) }
        #expect(table.count == records.count && table.compactCount == records.count)
        let readBack = records.allSatisfy { table[$0.id]?.record == $0 }
        #expect(readBack)
    }

    @Test func countingByTagsAndLaneReadsCompactAndWholeEntriesAlike() throws {
        // Given entries with and without tags and lanes, some held whole (crash evidence),
        // the others compact
        var table = PersistentOperationQueue.EntryTable()
        var records: [OperationRecord] = []
        for index in 0..<300 {
            var record = try makeRecord(index: index)
            record.id = RecordIdentifier.make()
            record.payload = Data()
            record.tags = index.isMultiple(of: 3) ? ["photos", "album:\(index % 2)"] : []
            record.lane = index.isMultiple(of: 5) ? "chat" : nil
            var entry = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0)
            entry.kills = index.isMultiple(of: 4) ? 1 : 0
            table[record.id] = entry
            records.append(record)
        }
        #expect(table.compactCount > 0 && table.compactCount < table.count)

        // When they are counted by tag and by lane, in place
        let photos = table.count { tags, _ in tags.contains("photos") }
        let album = table.count { tags, _ in tags.contains("album:1") }
        let chat = table.count { _, lane in lane == "chat" }

        // Then the counts are those of the records, whichever way each entry is held
        #expect(photos == records.filter { $0.tags.contains("photos") }.count && photos == 100)
        #expect(album == records.filter { $0.tags.contains("album:1") }.count && album == 50)
        #expect(chat == records.filter { $0.lane == "chat" }.count && chat == 60)
        #expect(table.count { _, _ in true } == 300)
    }
}
