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
        let pending = try reader.pendingRecords()
        let failed = try reader.failedRecords()
        let quarantined = try reader.quarantinedEntries()
        let running = pending.records.filter { $0.state == .running }.count
        let periodic = pending.records.filter { $0.repeating != nil }
        let now = Date()
        let nextDue = try reader.nextDueDate(now: now)
        let holder = reader.lockHolder
        let unreadable = Self.json(pending.unreadable, area: "pending") + Self.json(failed.unreadable, area: "failed")
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .integer(Int64(pending.records.count))),
                ("pendingByType", Self.countsByType(pending.records)),
                ("running", .integer(Int64(running))),
                ("failed", .integer(Int64(failed.records.count))),
                ("failedByType", Self.countsByType(failed.records)),
                ("quarantined", .integer(Int64(quarantined.count))),
                ("quarantinedEntries", .array(quarantined.map { .object([("name", .string($0.name)), ("reason", .string($0.reason))]) })),
                ("unreadable", .array(unreadable)),
                ("attemptsInFlight", .integer(Int64(running))),
                ("lockFileProcess", holder.map { .integer(Int64($0.processIdentifier)) } ?? .null),
                ("lockFileProcessIsRunning", holder.map { .bool($0.isRunning) } ?? .null),
                ("periodic", .integer(Int64(periodic.count))),
                ("periodicByType", Self.countsByType(periodic)),
                ("nextDueDate", RecordPresentation.json(nextDue)),
            ]).rendered(pretty: true))
            return
        }
        print("store \(store.path)")
        var table = TextTable(headers: ["AREA", "COUNT", "BY TYPE"])
        table.append(["pending", "\(pending.records.count)", Self.byTypeText(pending.records)])
        table.append(["  running", "\(running)", "-"])
        table.append(["  periodic", "\(periodic.count)", Self.byTypeText(periodic)])
        table.append(["failed", "\(failed.records.count)", Self.byTypeText(failed.records)])
        table.append(["quarantined", "\(quarantined.count)", "-"])
        table.append(["unreadable", "\(unreadable.count)", "-"])
        print(table.rendered())
        if !quarantined.isEmpty {
            print("quarantined entries:")
            for entry in quarantined { print("  \(entry.name): \(entry.reason ?? "(no reason recorded)")") }
        }
        printUnreadable(pending.unreadable, area: "pending")
        printUnreadable(failed.unreadable, area: "failed")
        // By the pending records' dates alone: prerequisites and run conditions are the app's to judge.
        print("next due: \(nextDue.map { $0 <= now ? "now" : RecordPresentation.text($0) } ?? "- (no pending records)")")
        if let holder {
            print("store.lock names process \(holder.processIdentifier), which is \(holder.isRunning ? "running (an app may hold the store)" : "not running")")
        }
    }

    /// Counts per type identifier, sorted by identifier.
    static func countsByType(_ records: [StoredOperationRecord]) -> JSONValue {
        .object(Dictionary(grouping: records, by: \.typeIdentifier).sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value.count))) })
    }

    static func byTypeText(_ records: [StoredOperationRecord]) -> String {
        let counts = Dictionary(grouping: records, by: \.typeIdentifier).sorted { $0.key < $1.key }
        return counts.isEmpty ? "-" : counts.map { "\($0.key) \($0.value.count)" }.joined(separator: ", ")
    }
}
