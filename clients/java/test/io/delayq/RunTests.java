package io.delayq;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * The test runner: for each class named (in package io.delayq), runs every
 * public method whose name starts with "test" on a new instance, in name
 * order, and prints TAP; exit status 1 when any failed. A name
 * Class.method runs that one method.
 */
public final class RunTests {
    private RunTests() {
    }

    public static void main(String[] args) throws Exception {
        List<Method> tests = new ArrayList<>();
        for (String name : args) {
            String[] parts = name.split("\\.", 2);
            Class<?> cls = Class.forName("io.delayq." + parts[0]);
            Method[] methods = cls.getMethods();
            Arrays.sort(methods, Comparator.comparing(Method::getName));
            for (Method m : methods) {
                if (m.getName().startsWith("test") && m.getParameterCount() == 0
                        && !Modifier.isStatic(m.getModifiers())
                        && (parts.length == 1 || parts[1].equals(m.getName()))) {
                    tests.add(m);
                }
            }
        }
        if (tests.isEmpty()) {
            System.out.println("Bail out! no tests found in " + String.join(" ", args));
            System.exit(1);
        }
        System.out.println("1.." + tests.size());
        int failed = 0;
        int n = 0;
        for (Method m : tests) {
            String name = m.getDeclaringClass().getSimpleName() + "." + m.getName();
            long start = System.nanoTime();
            try {
                m.invoke(m.getDeclaringClass().getDeclaredConstructor().newInstance());
                System.out.printf("ok %d - %s (%.2f s)%n", ++n, name, (System.nanoTime() - start) / 1e9);
            } catch (InvocationTargetException e) {
                failed++;
                System.out.printf("not ok %d - %s%n", ++n, name);
                Throwable cause = e.getCause();
                for (String line : stackTrace(cause).split("\n")) {
                    System.out.println("# " + line);
                }
            }
            System.out.flush();
        }
        System.out.println(failed == 0 ? "# all " + n + " passed" : "# " + failed + " of " + n + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    private static String stackTrace(Throwable t) {
        java.io.StringWriter w = new java.io.StringWriter();
        t.printStackTrace(new java.io.PrintWriter(w));
        return w.toString();
    }
}
