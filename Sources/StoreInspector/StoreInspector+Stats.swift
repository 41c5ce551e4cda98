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
    /// entries with their reasons, attempts in flight, and which process the lock file names.
    ///
    ///     pending       14   demo.upload 14
    ///     failed         3   demo.upload 3
    ///     quarantined    1
    ///       0F3A….record: The record file is corrupt (checksum mismatch); it cannot be read.
    func stats() throws {
        let reader = try readOnlyStore()
        let pending = try reader.loadPending()
        let failed = try reader.loadFailed()
        let quarantined = try reader.quarantinedEntries()
        let inFlight = reader.attemptsInFlight()
        let holder = lockHolder()
        let unreadable = Self.json(pending.skipped, area: "pending") + Self.json(failed.skipped, area: "failed")
        if json {
            print(JSONValue.object([
                ("store", .string(store.path)),
                ("pending", .integer(Int64(pending.records.count))),
                ("pendingByType", Self.countsByType(pending.records)),
                ("failed", .integer(Int64(failed.records.count))),
                ("failedByType", Self.countsByType(failed.records)),
                ("quarantined", .integer(Int64(quarantined.count))),
                ("quarantinedEntries", .array(quarantined.map { .object([("name", .string($0.name)), ("reason", .string($0.reason))]) })),
                ("unreadable", .array(unreadable)),
                ("attemptsInFlight", .integer(Int64(inFlight.count))),
                ("lockFileProcess", holder.map { .integer(Int64($0.pid)) } ?? .null),
                ("lockFileProcessIsRunning", holder.map { .bool($0.isRunning) } ?? .null),
            ]).rendered(pretty: true))
            return
        }
        print("store \(store.path)")
        var table = TextTable(headers: ["AREA", "COUNT", "BY TYPE"])
        table.append(["pending", "\(pending.records.count)", Self.byTypeText(pending.records)])
        table.append(["failed", "\(failed.records.count)", Self.byTypeText(failed.records)])
        table.append(["quarantined", "\(quarantined.count)", "-"])
        table.append(["unreadable", "\(unreadable.count)", "-"])
        table.append(["in flight", "\(inFlight.count)", "-"])
        print(table.rendered())
        if !quarantined.isEmpty {
            print("quarantined entries:")
            for entry in quarantined { print("  \(entry.name): \(entry.reason ?? "(no reason recorded)")") }
        }
        printUnreadable(pending.skipped, area: "pending")
        printUnreadable(failed.skipped, area: "failed")
        if let holder {
            print("store.lock names process \(holder.pid), which is \(holder.isRunning ? "running (an app may hold the store)" : "not running")")
        }
    }

    /// Counts per type identifier, sorted by identifier.
    static func countsByType(_ records: [OperationRecord]) -> JSONValue {
        .object(Dictionary(grouping: records, by: \.typeIdentifier).sorted { $0.key < $1.key }.map { ($0.key, .integer(Int64($0.value.count))) })
    }

    static func byTypeText(_ records: [OperationRecord]) -> String {
        let counts = Dictionary(grouping: records, by: \.typeIdentifier).sorted { $0.key < $1.key }
        return counts.isEmpty ? "-" : counts.map { "\($0.key) \($0.value.count)" }.joined(separator: ", ")
    }

    /// The process identifier the lock file names (its last holder) and whether it runs now.
    /// Reading the file takes no lock; a stale identifier only says who held it last.
    func lockHolder() -> (pid: Int32, isRunning: Bool)? {
        guard let text = try? String(contentsOf: store.appendingPathComponent("store.lock"), encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0 else { return nil }
        return (pid, kill(pid, 0) == 0 || errno == EPERM)
    }
}
