import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `stats` command.
extension StoreInspector {
    /// Prints counts per area and per type identifier (no registry needed), the quarantined
    /// entries with their reasons, attempts in flight, the periodic series among the pending
    /// records, when the next pending record is due (``ReadOnlyPersistentStore/nextDueDate(now:)``:
    /// by the records' dates alone), and which process the lock file names.
    ///
    ///     pending       14   demo.upload 13, demo.refresh 1
    ///       running      2   -
    ///       periodic     1   demo.refresh 1
    ///     failed         3   demo.upload 3
    ///     quarantined    1
    ///       0F3A….record: The record file is corrupt (checksum mismatch); it cannot be read.
    ///     next due: now
    func stats() throws {
        let reader = try readOnlyStore()
        let now = Date()
        var pendingCount = 0, running = 0, periodicCount = 0, failedCount = 0
        var pendingByType: [String: Int] = [:], periodicByType: [String: Int] = [:], failedByType: [String: Int] = [:]
        var nextDue: Date?
        var pendingUnreadable: [ReadOnlyPersistentStore.UnreadableEntry] = [], failedUnreadable: [ReadOnlyPersistentStore.UnreadableEntry] = []
        if let summary = try reader.indexedSummary(now: now) {
            // A journal store: from its index, read once, with no record decoded (a million
            // records in the time it takes to read the journal, in the memory of its index).
            pendingCount = summary.counts.pending
            running = summary.counts.running
            periodicCount = summary.counts.periodic
            failedCount = summary.counts.failed
            pendingByType = summary.counts.pendingByType
            periodicByType = summary.counts.periodicByType
            failedByType = summary.counts.failedByType
            nextDue = summary.nextDueDate
            pendingUnreadable = summary.unreadable
        } else {
            // A store not migrated to the journal yet: one pass over the pending records,
            // keeping counts, not records, and one reading for both areas and the markers.
            let (unreadable, failed) = try reader.withSnapshot { () throws -> ([ReadOnlyPersistentStore.UnreadableEntry], ReadOnlyPersistentStore.RecordList) in
                let unreadable = try reader.forEachPendingRecord { record in
                    pendingCount += 1
                    pendingByType[record.typeIdentifier, default: 0] += 1
                    if record.state == .running { running += 1 }
                    if record.repeating != nil {
                        periodicCount += 1
                        periodicByType[record.typeIdentifier, default: 0] += 1
                    }
                    let due = max(record.dueDate ?? now, now)
                    nextDue = min(nextDue ?? due, due)
                }
                return (unreadable, try reader.failedRecords())
            }
            pendingUnreadable = unreadable
            failedUnreadable = failed.unreadable
            failedCount = failed.records.count
            failedByType = Dictionary(grouping: failed.records, by: \.typeIdentifier).mapValues(\.count)
        }
        let quarantined = try reader.quarantinedEntries()
        let holder = reader.lockHolder
        let unreadable = Self.json(pendingUnreadable, area: "pending") + Self.json(failedUnreadable, area: "failed")
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .integer(Int64(pendingCount))),
                ("pendingByType", Self.countsByType(pendingByType)),
                ("running", .integer(Int64(running))),
                ("failed", .integer(Int64(failedCount))),
                ("failedByType", Self.countsByType(failedByType)),
                ("quarantined", .integer(Int64(quarantined.count))),
                ("quarantinedEntries", .array(quarantined.map { .object([("name", .string($0.name)), ("reason", .string($0.reason))]) })),
                ("unreadable", .array(unreadable)),
                ("attemptsInFlight", .integer(Int64(running))),
                ("lockFileProcess", holder.map { .integer(Int64($0.processIdentifier)) } ?? .null),
                ("lockFileProcessIsRunning", holder.map { .bool($0.isRunning) } ?? .null),
                ("periodic", .integer(Int64(periodicCount))),
                ("periodicByType", Self.countsByType(periodicByType)),
                ("nextDueDate", RecordPresentation.json(nextDue)),
            ]).rendered(pretty: true))
            return
        }
        print("store \(store.path)")
        var table = TextTable(headers: ["AREA", "COUNT", "BY TYPE"])
        table.append(["pending", "\(pendingCount)", Self.byTypeText(pendingByType)])
        table.append(["  running", "\(running)", "-"])
        table.append(["  periodic", "\(periodicCount)", Self.byTypeText(periodicByType)])
        table.append(["failed", "\(failedCount)", Self.byTypeText(failedByType)])
        table.append(["quarantined", "\(quarantined.count)", "-"])
        table.append(["unreadable", "\(unreadable.count)", "-"])
        print(table.rendered())
        if !quarantined.isEmpty {
            print("quarantined entries:")
            for entry in quarantined { print("  \(entry.name): \(entry.reason ?? "(no reason recorded)")") }
        }
        printUnreadable(pendingUnreadable, area: "pending")
        printUnreadable(failedUnreadable, area: "failed")
        // By the pending records' dates alone: prerequisites and run conditions are the app's to judge.
        print("next due: \(nextDue.map { $0 <= now ? "now" : RecordPresentation.text($0) } ?? "- (no pending records)")")
        if let holder {
            print("store.lock names process \(holder.processIdentifier), which is \(holder.isRunning ? "running (an app may hold the store)" : "not running")")
        }
    }

    /// Counts per type identifier, sorted by identifier.
    static func countsByType(_ counts: [String: Int]) -> JSONValue {
        .object(counts.sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value))) })
    }

    static func byTypeText(_ counts: [String: Int]) -> String {
        counts.isEmpty ? "-" : counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
