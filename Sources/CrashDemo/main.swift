import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// crash-demo: the crash-and-resume demo (no arguments), and the child "app" processes that
// the demo and the crash tests kill and relaunch.

let arguments = Array(CommandLine.arguments.dropFirst())

func option(_ name: String, in arguments: [String] = arguments) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("crash-demo: \(message)\n".utf8))
    exit(2)
}

do {
    switch arguments.first {
    case "app":
        guard let store = option("--store"), let effects = option("--effects"), let count = option("--count").flatMap(Int.init) else {
            fail("usage: crash-demo app --store DIR --effects FILE --count N [--albums A] [--crash-loop-limit K] [--crasher | --killer] [--attempt-ms MS] [--max-concurrent W] [--inactive] [--grace-ms MS]")
        }
        var app = AppCommand(store: URL(fileURLWithPath: store), effects: effects, count: count)
        if let albums = option("--albums").flatMap(Int.init) { app.albums = albums }
        if let limit = option("--crash-loop-limit").flatMap(Int.init) { app.crashLoopLimit = limit }
        if let milliseconds = option("--attempt-ms").flatMap(Int.init) { app.attemptMilliseconds = milliseconds }
        app.addsCrasher = arguments.contains("--crasher")
        app.addsKiller = arguments.contains("--killer")
        if let width = option("--max-concurrent").flatMap(Int.init), width > 0 { app.maximumConcurrentAttempts = width }
        app.isInactive = arguments.contains("--inactive")
        if let milliseconds = option("--grace-ms").flatMap(Int.init), milliseconds >= 0 { app.graceMilliseconds = milliseconds }
        try app.run()
    case "hold":
        // Opens the store, says so, and keeps it open until killed (the two-process lock test).
        guard let store = option("--store") else { fail("usage: crash-demo hold --store DIR") }
        let queue = try PersistentOperationQueue(directory: URL(fileURLWithPath: store))
        FileHandle.standardOutput.write(Data("holding \(queue.directory.path)\n".utf8))
        while true { sleep(60) }
    case "chained-crash":
        // Installs a SIGSEGV handler of its own (as a crash reporter would), opens the store,
        // then crashes with a bad memory access: the queue's crash-signal handler notes the
        // crash in the store and passes the signal on to this handler, which exits with 42.
        guard let store = option("--store") else { fail("usage: crash-demo chained-crash --store DIR") }
        var action = sigaction()
        #if canImport(Glibc)
        action.__sigaction_handler.sa_handler = { _ in
            let line = "the earlier handler ran\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
            _exit(42)
        }
        #else
        action.__sigaction_u.__sa_handler = { _ in _exit(42) }
        #endif
        sigemptyset(&action.sa_mask)
        sigaction(SIGSEGV, &action, nil)
        let queue = try PersistentOperationQueue(directory: URL(fileURLWithPath: store))
        FileHandle.standardOutput.write(Data("opened \(queue.directory.path)\n".utf8))
        UnsafeMutablePointer<Int>(bitPattern: 8)!.pointee = 1
        withExtendedLifetime(queue) {}
    case "soak":
        exit(try SoakCommand(arguments: Array(arguments.dropFirst())).run() ? 0 : 1)
    case "lanes-soak":
        exit(try LaneSoakCommand(arguments: Array(arguments.dropFirst())).run() ? 0 : 1)
    case "lanes-app":
        try LaneAppCommand(arguments: Array(arguments.dropFirst())).run()
    case "producer":
        try ProducerCommand(arguments: Array(arguments.dropFirst())).run()
    case "inbox-producer":
        try InboxProducerCommand(arguments: Array(arguments.dropFirst())).run()
    case "inbox-owner":
        try InboxOwnerCommand(arguments: Array(arguments.dropFirst())).run()
    case "durability-probe":
        guard let store = option("--store") else { fail("usage: crash-demo durability-probe --store DIR") }
        try DurabilityProbeCommand(store: URL(fileURLWithPath: store)).run()
    case "add-expiring":
        guard let store = option("--store"), let count = option("--count").flatMap(Int.init),
              let seconds = option("--expires-in").flatMap(TimeInterval.init) else {
            fail("usage: crash-demo add-expiring --store DIR --count N --expires-in SECONDS")
        }
        try AddExpiringCommand(store: URL(fileURLWithPath: store), count: count, expiresIn: seconds).run()
    case "periodic":
        guard let store = option("--store"), let effects = option("--effects"),
              let interval = option("--interval").flatMap(TimeInterval.init),
              let milliseconds = option("--attempt-ms").flatMap(Int.init) else {
            fail("usage: crash-demo periodic --store DIR --effects FILE --interval SECONDS --attempt-ms MS [--until-periods N]")
        }
        try PeriodicCommand(store: URL(fileURLWithPath: store), effects: effects, interval: interval,
                            attemptMilliseconds: milliseconds, untilPeriods: option("--until-periods").flatMap(Int.init)).run()
    case "restore-report":
        guard let store = option("--store") else { fail("usage: crash-demo restore-report --store DIR") }
        try RestoreReportCommand(store: URL(fileURLWithPath: store)).run()
        exit(0)
    default:
        exit(try DemoCommand(options: DemoOptions(arguments: arguments)).run())
    }
} catch {
    fail("\(error)")
}
