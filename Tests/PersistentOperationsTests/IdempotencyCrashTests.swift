import Foundation
import Testing
@testable import PersistentOperations

/// Idempotency keys under SIGKILL: a producer child (`crash-demo producer`) re-sends the last
/// request it acknowledged at every launch, before `restore()`, as a producer whose
/// acknowledgement was lost would, and is killed at random moments.
@Suite("Idempotency keys: a producer killed and relaunched", .serialized, .timeLimit(.minutes(3)))
struct IdempotencyCrashTests {
    @Test(arguments: [11, 2_026] as [UInt64])
    func aProducerKilledAtRandomMomentsStoresEachRequestOnce(seed: UInt64) async throws {
        // Given a producer of 60 requests of 3 jobs each, every request one batch with its key
        let directory = try TemporaryDirectory()
        let effects = directory.url.appendingPathComponent("effects.txt").path
        let requests = 60
        let arguments = ["producer", "--store", directory.store.path, "--effects", effects, "--requests", "\(requests)"]

        // When it is SIGKILLed 12 times at random moments (2 to 60 ms after a launch starts), then runs to the end
        try await onDedicatedThread {
            // (Each pause counts from the launch's first line, however slowly the app starts.)
            try ChildApp.killRepeatedlyThenFinish(arguments, kills: 12, pause: 2_000...60_000, seed: seed, timeout: 60, afterFirstAttemptIn: effects)
        }

        // Then every request was acknowledged, and every job ran
        let lines = try String(contentsOfFile: effects, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        #expect(lines.last == ["done"])
        let acknowledged = Set(lines.filter { $0.first == "ack" }.compactMap { Int($0[1]) })
        #expect(acknowledged == Set(1...requests))
        var nonces: [Int: Set<Substring>] = [:]
        var members: [Int: Set<Int>] = [:]
        for line in lines where line.first == "run" && line.count == 4 {
            guard let request = Int(line[1]), let member = Int(line[2]) else { continue }
            nonces[request, default: []].insert(line[3])
            members[request, default: []].insert(member)
        }
        #expect(members.count == requests && members.values.allSatisfy { $0 == [0, 1, 2] })
        // And each request's jobs came from one add: one nonce per request, however often it
        // was sent again (a request stored twice would run with two)
        let duplicated = nonces.filter { $0.value.count != 1 }
        #expect(duplicated.isEmpty, "requests stored more than once: \(duplicated.keys.sorted())")
        let launches = lines.filter { $0.first == "launch" }.count
        let resent = lines.filter { $0.first == "ack" }.count - requests
        print("producer killed 12 times (seed \(seed)): \(launches) launches, \(resent) requests sent again, \(duplicated.count) stored twice")
        // And nothing is left pending
        #expect(try RecordStore(directory: directory.store, access: .readOnly).loadPending().records.isEmpty)
    }
}
