import CrashHarness
import Testing

/// The journal checker shared by crash-demo, the soak and the child-process tests: each rule
/// is shown to hold on a good journal and to fail on one that breaks it, so that a checker
/// that cannot fail would be caught here.
@Suite("Contract replay")
struct ContractReplayTests {
    static func replay(_ lines: String) -> ContractReplay {
        var contract = ContractReplay()
        for line in lines.split(separator: "\n") {
            contract.observe(JournalEvent(line: line))
        }
        return contract
    }

    static let create = AlbumGraph.index(album: 0, role: .create)
    static let photo = AlbumGraph.index(album: 0, role: .photo(1))
    static let publish = AlbumGraph.index(album: 0, role: .publish)

    @Test func aDependentStartedAfterItsPrerequisiteSucceededInAnEarlierLaunchKeepsTheGraphRule() {
        // Given a journal where the prerequisite succeeded, the app was killed, and the dependent
        // started in the next launch
        let contract = Self.replay("""
            launch 1 restored=0 quarantined=0 failed-after-crashes=0
            failed-area
            add \(Self.create)
            ack \(Self.create) id=A
            add \(Self.photo) after=\(Self.create)
            ack \(Self.photo) id=B after=\(Self.create)
            start \(Self.create) attempt=1 retries=0 retry=false pid=1
            done \(Self.create)
            launch 2 restored=1 quarantined=0 failed-after-crashes=0
            restored \(Self.photo) id=B
            failed-area
            start \(Self.photo) attempt=1 retries=0 retry=false pid=2
            done \(Self.photo)
            """)
        // Then no rule is broken
        #expect(contract.violations.isEmpty, "\(contract.violations)")
        #expect(contract.startsBeforePrerequisites == 0)
        #expect(contract.prerequisites[Self.photo] == [Self.create])
    }

    @Test func aDependentThatStartsBeforeItsPrerequisiteSucceededBreaksTheGraphRule() {
        // Given a journal where the dependent starts while its prerequisite is still retrying
        let contract = Self.replay("""
            launch 1 restored=0 quarantined=0 failed-after-crashes=0
            add \(Self.create)
            ack \(Self.create) id=A
            add \(Self.photo) after=\(Self.create)
            ack \(Self.photo) id=B after=\(Self.create)
            start \(Self.create) attempt=1 retries=0 retry=false pid=1
            retry \(Self.create) counted
            start \(Self.photo) attempt=1 retries=0 retry=false pid=1
            """)
        // Then the replay reports it, naming both
        #expect(contract.startsBeforePrerequisites == 1)
        #expect(contract.violations.count == 1)
        #expect(contract.violations.first?.contains("album 0 photo 1 started (attempt 1, launch 1) before the success of its prerequisite album 0 create") == true)
    }

    @Test func aGraphNodeStartedWithoutAJournaledAddBreaksTheGraphRule() {
        // Given a graph node whose prerequisites were never journaled
        let contract = Self.replay("""
            launch 1 restored=0 quarantined=0 failed-after-crashes=0
            start \(Self.publish) attempt=1 retries=0 retry=false pid=1
            """)
        // Then the replay cannot vouch for it, and says so
        #expect(contract.startsBeforePrerequisites == 1)
    }

    /// A batch of three stored in launch 1; `launch2` is what the next launch's restore found.
    static func batchJournal(launch2: String) -> String {
        """
        launch 1 restored=0 quarantined=0 failed-after-crashes=0
        failed-area
        add \(create) batch=album0
        add \(photo) after=\(create) batch=album0
        add \(publish) after=\(photo) batch=album0
        ack \(create) id=A
        start \(create) attempt=1 retries=0 retry=false pid=1
        done \(create)
        launch 2 restored=2 quarantined=0 failed-after-crashes=0
        \(launch2)
        """
    }

    @Test func aBatchRestoredWholeOrCompletedKeepsTheBatchRule() {
        // Given a batch whose completed member is gone and whose others are restored or failed
        let contract = Self.replay(Self.batchJournal(launch2: """
            restored \(Self.photo) id=B
            failed-area \(Self.publish)
            """))
        // Then no rule is broken
        #expect(contract.violations.isEmpty, "\(contract.violations)")
        #expect(contract.partlyRestoredBatches == 0)
    }

    @Test func anAcknowledgedBatchMissingAMemberAtRestoreBreaksTheBatchRule() {
        // Given a launch whose restore found only one of the two unfinished members
        let contract = Self.replay(Self.batchJournal(launch2: """
            restored \(Self.photo) id=B
            failed-area
            """))
        // Then the replay reports the batch as partly restored, naming the missing member
        #expect(contract.partlyRestoredBatches == 1)
        #expect(contract.violations.first?.contains("batch album0 was restored in part in launch 2: album 0 publish") == true)
    }

    @Test func aBatchNeverAcknowledgedIsCheckedOnceAnyMemberIsRestored() {
        // Given a batch whose addOperations never returned (no ack), and a restore that found
        // one member only
        let partly = Self.replay("""
            launch 1 restored=0 quarantined=0 failed-after-crashes=0
            add \(Self.create) batch=album0
            add \(Self.photo) after=\(Self.create) batch=album0
            launch 2 restored=1 quarantined=0 failed-after-crashes=0
            restored \(Self.create) id=A
            failed-area
            """)
        // And one whose restore found none of them
        let none = Self.replay("""
            launch 1 restored=0 quarantined=0 failed-after-crashes=0
            add \(Self.create) batch=album0
            add \(Self.photo) after=\(Self.create) batch=album0
            launch 2 restored=0 quarantined=0 failed-after-crashes=0
            failed-area
            """)
        // Then the first breaks the rule and the second does not (the batch was never stored)
        #expect(partly.partlyRestoredBatches == 1)
        #expect(none.violations.isEmpty, "\(none.violations)")
    }

    @Test func aStoredBatchThatALaterLaunchLosesEntirelyBreaksTheBatchRule() {
        // Given a batch seen running in launch 1, and a launch 2 whose restore found nothing
        let contract = Self.replay(Self.batchJournal(launch2: "failed-area"))
        // Then both unfinished members are reported missing
        #expect(contract.partlyRestoredBatches == 1)
        #expect(contract.violations.first?.contains("album 0 photo 1, album 0 publish") == true)
    }

    @Test func aLaunchKilledBeforeItsFailedAreaLineIsNotJudged() {
        // Given a launch killed while it journaled its restored operations
        let contract = Self.replay(Self.batchJournal(launch2: "restored \(Self.photo) id=B"))
        // Then its partial list is not taken for a partial restore
        #expect(contract.violations.isEmpty, "\(contract.violations)")
    }

    @Test func theGraphLinesParse() {
        #expect(JournalEvent(line: "add 1000001 after=1000000 batch=album0") == .adding(index: 1_000_001, prerequisites: [1_000_000], batch: "album0"))
        #expect(JournalEvent(line: "add 1000000") == .adding(index: 1_000_000, prerequisites: [], batch: nil))
        #expect(JournalEvent(line: "ack 1000009 id=X after=1000001,1000002") == .acknowledged(index: 1_000_009, id: "X", prerequisites: [1_000_001, 1_000_002]))
        #expect(JournalEvent(line: "skip 1000009 after=1000002") == .skipped(index: 1_000_009, prerequisites: [1_000_002]))
        #expect(JournalEvent(line: "failed-area 1000002,1000009") == .failedArea(indices: [1_000_002, 1_000_009]))
        #expect(JournalEvent(line: "failed-area") == .failedArea(indices: []))
        #expect(JournalEvent(line: "abandoned X prerequisite=Y") == .abandoned(id: "X", prerequisite: "Y"))
        #expect(AlbumGraph.name(of: 1_000_029) == "album 2 publish")
        #expect(AlbumGraph.name(of: 7) == "upload 7")
    }
}
