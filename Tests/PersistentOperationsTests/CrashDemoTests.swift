import Foundation
import Testing

/// The crash-and-resume demo (`crash-demo` without a subcommand), run end to end.
@Suite("Crash demo", .timeLimit(.minutes(2)))
struct CrashDemoTests {
    @Test func theDemoKillsTheAppTwiceAndReportsNothingLost() async throws {
        // Given a small demo run: 8 uploads and 3 albums (one refuses a photo), 2 SIGKILLs
        let result = try await onDedicatedThread {
            try ChildApp.run("crash-demo", ["--count", "8", "--albums", "3", "--kills", "2", "--attempt-ms", "30"], timeout: 60)
        }
        // Then it exits with 0 after printing both kills, the relaunches and the tally
        #expect(result.status == 0, "\(result.output)\n\(result.error)")
        let lines = result.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(lines.filter { $0.hasPrefix("*** SIGKILL app") }.count == 2)
        #expect(lines.contains { $0.hasPrefix("[launch 3] app started") })
        #expect(lines.contains { $0.hasPrefix("[launch 3] every upload finished") })
        #expect(lines.contains { $0.hasPrefix("completed:") && $0.hasSuffix(" 20") })   // 7 uploads, 13 album nodes
        #expect(lines.contains {
            $0.hasPrefix("failed:") && $0.contains(" 3  in the failed area with reason \"403 upload refused\" x2, \"its prerequisite failed for good\"")
        })
        #expect(lines.contains { $0.hasPrefix("[launch 1] added album 0 (create <- photos 1-3 <- publish) with one addOperations call") })
        #expect(lines.contains("dependents started before their prerequisites succeeded: 0"))
        #expect(lines.contains("batches partly restored: 0"))
        #expect(lines.contains { $0.replacingOccurrences(of: " ", with: "") == "lost:0" })
        #expect(lines.contains("started again after completion: 0"))
        #expect(lines.last?.hasPrefix("OK:") == true)
    }

    @Test func theDemoRejectsAnUnknownOption() async throws {
        let result = try await onDedicatedThread { try ChildApp.run("crash-demo", ["--frobnicate"]) }
        #expect(result.status == 2)
        #expect(result.error.contains("unknown option \"--frobnicate\""))
    }
}

@Suite("Crash demo: stopping after the kill", .timeLimit(.minutes(2)))
struct CrashDemoStopAfterKillTests {
    @Test func stopAfterKillLeavesTheUnfinishedUploadsPendingForTheInspector() async throws {
        // Given a kept store
        let directory = try TemporaryDirectory()
        let store = directory.url.appendingPathComponent("demo-store").path
        // When the demo runs with one kill and --stop-after-kill
        let result = try await onDedicatedThread {
            try ChildApp.run("crash-demo", ["--count", "8", "--kills", "1", "--store", store, "--stop-after-kill", "--attempt-ms", "30"], timeout: 60)
        }
        // Then it stops after the kill without relaunching the app, and says what is pending
        #expect(result.status == 0, "\(result.output)\n\(result.error)")
        #expect(result.output.contains("*** SIGKILL app"))
        #expect(!result.output.contains("[launch 2]"))
        #expect(result.output.contains("Stopped after the last SIGKILL"))
        // And the inspector lists the unfinished uploads, the interrupted ones with their attempt
        let list = try await StoreInspectorTests.inspect("list", store, "--json")
        let pending = try #require(try list.json()["pending"] as? [[String: Any]])
        #expect(!pending.isEmpty)
        #expect(pending.contains { ($0["attemptsInFlight"] as? Int ?? 0) > 0 && ($0["attempts"] as? Int ?? 0) > 0 })
    }

    @Test func stopAfterKillNeedsAKeptStore() async throws {
        let result = try await onDedicatedThread { try ChildApp.run("crash-demo", ["--stop-after-kill"]) }
        #expect(result.status == 2)
        #expect(result.error.contains("--stop-after-kill needs --store DIR"))
    }
}
